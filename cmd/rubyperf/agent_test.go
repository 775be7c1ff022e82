package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/procstat"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestAgentUsage: the agent's command line is checked before anything runs.
func TestAgentUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{nil, "", "--endpoint HOST:PORT is required"},
		{[]string{"--endpoint", "collector"}, "", `--endpoint "collector": HOST:PORT`},
		{[]string{"--endpoint", "c:4317", "--protocol", "udp"}, "", `--protocol "udp": grpc or http`},
		{[]string{"--endpoint", "c:4317", "--interval", "100ms"}, "", "--interval 100ms: at least 1s"},
		{[]string{"--endpoint", "c:4317", "--header", "novalue"}, "", `"novalue" is not KEY=VALUE`},
		{[]string{"--endpoint", "c:4317"}, "Authorization", `$OTEL_EXPORTER_OTLP_HEADERS: "Authorization" is not KEY=VALUE`},
		{[]string{"--endpoint", "c:4317", "--insecure", "--ca-file", "ca.pem"}, "", "--insecure turns TLS off"},
		{[]string{"--endpoint", "c:4317", "--cert-file", "c.pem"}, "", "--cert-file and --key-file go together"},
		{[]string{"--endpoint", "c:4317", "--match", "("}, "", "--match: error parsing regexp"},
		{[]string{"--endpoint", "c:4317", "--queue", "0"}, "", "--queue 0: at least 1"},
		{[]string{"--endpoint", "c:4317", "extra"}, "", `unexpected argument "extra"`},
		{[]string{"--endpoint", "c:4317", "--pyroscope", "http://p:4040"}, "", "--endpoint and --pyroscope name two destinations"},
		{[]string{"--pyroscope", "p:4040"}, "", `--pyroscope "p:4040": a URL, e.g. http://localhost:4040`},
		{[]string{"--pyroscope", "http://p:4040", "--insecure"}, "", "an http:// URL is plain text"},
	} {
		t.Setenv(headersEnv, c.env)
		var stderr bytes.Buffer
		if code := run(append([]string{"agent"}, c.args...), &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("agent %q: exit %d, %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// agentStatus is an agent's line per interval.
var agentStatus = regexp.MustCompile(`^rubyperf agent: \S+ \+\S+: (\d+) process(?:es)?, (\d+) samples, (\d+) lost so far; sent (\d+), queued (\d+)/\d+, dropped (\d+).*; rss (\d+) MiB, cpu ([\d.]+)%`)

// agentEnd is its last line.
var agentEnd = regexp.MustCompile(`stopped after \S+: (\d+) intervals in (\d+) requests, (\d+) sent, (\d+) dropped while the collector was unreachable, (\d+) rejected, (\d+) unsent`)

// soakDuration is how long TestAgentSoak runs: RUBYPERF_AGENT_SOAK (a
// duration; the acceptance run is 10m), else 40 s.
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("RUBYPERF_AGENT_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Second {
			t.Fatalf("RUBYPERF_AGENT_SOAK=%q: a duration of 10s or more", s)
		}
		return d
	}
	return 40 * time.Second
}

// procHWM is process pid's peak resident memory (VmHWM).
func procHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestAgentSoak: `rubyperf agent`, as a user runs it, against a real
// collector while Ruby processes come and go: every interval arrives, every
// sample the agent counted is in what arrived, every process that lived a
// few seconds has profiles, and the agent's memory does not grow. With
// RUBYPERF_AGENT_SOAK=10m it is the acceptance run.
func TestAgentSoak(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	soak := soakDuration(t)
	if d, ok := t.Deadline(); ok && time.Until(d) < soak+3*time.Minute {
		t.Fatalf("a soak of %s needs go test -timeout %s or more", soak, (soak + 5*time.Minute).Round(time.Minute))
	}
	interval := 2 * time.Second
	if soak >= 2*time.Minute {
		interval = 10 * time.Second // the default, as deployed
	}
	r := testruby.Get(t, "debian-3.3")
	bin := rubyperfBinary(t)
	col := otelcoltest.Start(t)
	// The agent samples only this test's Rubies (--match): other tests run
	// theirs meanwhile.
	token := fmt.Sprintf("rubyperf-soak-%d", time.Now().UnixNano())
	dir := filepath.Join(t.TempDir(), token)
	testruby.CopyFile(t, filepath.Join("..", "..", "testdata", "ruby", "shares.rb"), filepath.Join(dir, "shares.rb"))
	script := filepath.Join(dir, "shares.rb")

	// One Ruby for the whole run, started first, so that every interval
	// from the agent's first sample on has samples; and others that live 1
	// to 5 s, up to three at a time, started one after another.
	testruby.Start(t, r, script)
	stderr := &soakLog{started: make(chan struct{})}
	agent := exec.Command(bin, "agent", "--endpoint", col.GRPCAddr, "--insecure", "--interval", interval.String(),
		"--match", token, "--label", "test=soak")
	agent.Stderr = stderr
	launched := time.Now()
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	// The soak counts from the agent's first sample: under a loaded CI the
	// program's verification and the first attach took more than the
	// first 2 s interval, which then had nothing to send.
	select {
	case <-stderr.started:
	case <-time.After(time.Minute):
		t.Fatalf("agent not sampling a minute after it started:\n%s", stderr.String())
	}
	start := time.Now()
	type started struct {
		pid  int
		life time.Duration
	}
	var (
		mu    sync.Mutex
		short []started
		wg    sync.WaitGroup
	)
	live := make(chan struct{}, 3)
	for time.Since(start) < soak-3*time.Second {
		live <- struct{}{}
		life := time.Second + rand.N(4*time.Second)
		cmd := exec.Command(r.Exe, script, strconv.FormatFloat(life.Seconds(), 'f', 2, 64))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		short = append(short, started{cmd.Process.Pid, life})
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd.Wait()
			<-live
		}()
		time.Sleep(time.Duration(500+rand.N(1000)) * time.Millisecond)
	}
	wg.Wait()
	time.Sleep(time.Until(start.Add(soak)))
	cpu, err := procstat.CPU(agent.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(launched) // its CPU includes its start
	hwm := procHWM(t, agent.Process.Pid)
	agent.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v\n%s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("agent still running a minute after SIGTERM\n%s", stderr.String())
	}
	log := stderr.String()

	// Its lines: one per interval, and the end.
	var samples, rss []int64
	var cpus []float64
	for _, line := range strings.Split(log, "\n") {
		if m := agentStatus.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[2], 10, 64)
			r, _ := strconv.ParseInt(m[7], 10, 64)
			c, _ := strconv.ParseFloat(m[8], 64)
			samples, rss, cpus = append(samples, n), append(rss, r), append(cpus, c)
		}
	}
	end := agentEnd.FindStringSubmatch(log)
	if end == nil || len(samples) == 0 {
		t.Fatalf("no status lines or no end line:\n%s", log)
	}
	intervals, _ := strconv.Atoi(end[1])
	// One request an interval: nothing here is near MaxRequestBytes.
	if end[4] != "0" || end[5] != "0" || end[6] != "0" || end[2] != end[1] || end[3] != end[2] {
		t.Errorf("end: %s", end[0])
	}
	if want := int(soak / interval); intervals < want {
		t.Errorf("%d intervals sent in %s of %s intervals, want %d", intervals, soak, interval, want)
	}

	// What arrived: every interval, once, contiguous, with every sample.
	pds, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	var starts []int64
	var arrived int64
	pids := map[int64]int64{}
	for _, pd := range pds {
		profs, err := otelcoltest.Flatten(pd)
		if err != nil {
			t.Fatal(err)
		}
		if len(profs) == 0 {
			t.Fatalf("a request with no profile")
		}
		starts = append(starts, profs[0].Start)
		for _, p := range profs {
			if p.Resource["test"] != "soak" {
				t.Errorf("resource without the --label: %v", p.Resource)
			}
			for _, s := range p.Samples {
				arrived += s.Values[0]
				pids[p.Resource["process.pid"].(int64)] += s.Values[0]
			}
		}
	}
	var counted int64
	for _, n := range samples {
		counted += n
	}
	if len(pds) != intervals || arrived != counted {
		t.Errorf("%d requests arrived with %d samples; the agent sent %d intervals of %d samples", len(pds), arrived, intervals, counted)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	for i := 1; i < len(starts); i++ {
		if gap := time.Duration(starts[i] - starts[i-1]); gap < interval*8/10 || gap > interval*12/10 {
			t.Errorf("interval %d starts %s after the one before, want %s: an interval is missing", i, gap, interval)
		}
	}
	missing := 0
	for _, s := range short {
		if s.life >= 2*time.Second && pids[int64(s.pid)] == 0 {
			missing++
			t.Errorf("pid %d ran Ruby for %s, and has no profile", s.pid, s.life)
		}
	}
	// Memory: what it holds does not grow with the processes it has seen.
	half := len(rss) / 2
	peak := func(v []int64) int64 {
		m := int64(0)
		for _, x := range v {
			m = max(m, x)
		}
		return m
	}
	late, early := peak(rss[half:]), peak(rss[:max(half, 1)])
	if late > early+24 {
		t.Errorf("agent RSS grows: peak %d MiB in the first half, %d MiB in the second", early, late)
	}
	sort.Float64s(cpus)
	t.Logf("soak %s, intervals of %s: %d intervals, %d samples, %d processes (%d short-lived, %d missing); agent peak RSS %d MiB (VmHWM; "+
		"status lines: peak %d MiB in the first half, %d MiB in the second), CPU %.2f%% of one core over the run (median interval %.1f%%)",
		soak, interval, intervals, arrived, len(pids), len(short), missing, hwm>>20, early, late, 100*float64(cpu)/float64(wall), cpus[len(cpus)/2])
}

// soakLog is an agent's stderr as TestAgentSoak reads it, safe to read while
// the agent writes: started is closed once it says it is sampling.
type soakLog struct {
	mu      sync.Mutex
	b       bytes.Buffer
	started chan struct{}
	once    sync.Once
}

func (l *soakLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if bytes.Contains(l.b.Bytes(), []byte("rubyperf agent: sampling started")) {
		l.once.Do(func() { close(l.started) })
	}
	return len(p), nil
}

func (l *soakLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
