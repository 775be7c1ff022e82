package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
)

// testRuby is the Ruby the agent's tests run: Debian's, stripped, as most
// fleets run it.
const testRuby = "debian-3.3"

// script is a test Ruby script's path.
func script(name string) string { return filepath.Join("..", "testdata", "ruby", name) }

// startAgent runs the agent until the returned stop is called, which
// returns its stats.
func startAgent(t *testing.T, opts Options) (stop func() *Stats, log *testruby.Log) {
	t.Helper()
	testskip.Privileged(t, bpf.Supported())
	log = &testruby.Log{}
	opts.Log = log
	if opts.Select == nil {
		opts.Select = testruby.Child
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  *Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := Run(ctx, opts)
		done <- result{st, err}
	}()
	var once sync.Once
	var res result
	stop = func() *Stats {
		once.Do(func() {
			cancel()
			select {
			case res = <-done:
			case <-time.After(opts.FlushTimeout + 30*time.Second):
				t.Fatalf("agent did not stop; log:\n%s", log)
			}
		})
		if res.err != nil {
			t.Fatalf("agent: %v; log:\n%s", res.err, log)
		}
		return res.st
	}
	t.Cleanup(func() { cancel() })
	// Sampling starts once the BPF program is loaded (seconds, under -race).
	for deadline := time.Now().Add(time.Minute); !strings.Contains(log.String(), "sampling started"); {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not start sampling within a minute:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return stop, log
}

// received flattens what the collector received, a request per interval.
func received(t *testing.T, c *otelcoltest.Collector) [][]otelcoltest.Profile {
	t.Helper()
	pds, err := c.Received()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]otelcoltest.Profile
	for _, pd := range pds {
		profs, err := otelcoltest.Flatten(pd)
		if err != nil {
			t.Fatalf("a request the collector received does not resolve: %v", err)
		}
		out = append(out, profs)
	}
	return out
}

// shares is how a process's samples split among the Ruby methods in
// names: the innermost of them in each sample's stack.
func shares(profs []otelcoltest.Profile, pid int, names ...string) (map[string]float64, int64) {
	counts := map[string]int64{}
	var total int64
	for _, p := range profs {
		if p.Resource["process.pid"] != int64(pid) {
			continue
		}
		for _, s := range p.Samples {
			total += s.Values[0]
		frames:
			for _, f := range s.Frames {
				for _, n := range names {
					if f.Function == n {
						counts[n] += s.Values[0]
						break frames
					}
				}
			}
		}
	}
	out := map[string]float64{}
	for n, c := range counts {
		out[n] = float64(c) / float64(max(total, 1))
	}
	return out, total
}

// TestAgentSendsProfiles: over gRPC and over HTTP, a real collector gets a
// profile per interval of each Ruby process, started before the agent or
// after it, that names its Ruby methods in the shares they ran, with the
// process's resource attributes.
func TestAgentSendsProfiles(t *testing.T) {
	for _, protocol := range []string{ProtocolGRPC, ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			r := testruby.Get(t, testRuby)
			c := otelcoltest.Start(t)
			addr := c.GRPCAddr
			if protocol == ProtocolHTTP {
				addr = c.HTTPAddr
			}
			before := testruby.Start(t, r, script("shares.rb"))
			stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: addr, Protocol: protocol, Insecure: true},
				Interval: 2 * time.Second, Labels: map[string]string{"deployment.environment": "test"}})
			time.Sleep(3 * time.Second)
			after := testruby.Start(t, r, script("shares.rb"), "4") // exits by itself
			time.Sleep(5 * time.Second)
			st := stop()
			t.Logf("stats %+v\nlog:\n%s", *st, log)
			got := received(t, c)
			if st.Intervals < 4 || st.Requests != st.Intervals || uint64(len(got)) != st.Requests || st.Sent != st.Requests || st.Dropped+st.Rejected+uint64(st.Unsent) != 0 {
				t.Fatalf("%d requests received; agent: %+v", len(got), *st)
			}
			var all []otelcoltest.Profile
			for _, profs := range got {
				all = append(all, profs...)
			}
			for _, cmd := range []int{before.Process.Pid, after.Process.Pid} {
				sh, total := shares(all, cmd, "Shares#heavy", "Shares#light")
				t.Logf("pid %d: %d samples: %v", cmd, total, sh)
				// Fewer than 99 a second when the machine is busy (CPU time
				// is sampled), but not none.
				if total < 40 {
					t.Errorf("pid %d: %d samples in 4 s or more of CPU-bound Ruby", cmd, total)
				}
				// 3:1 by design; within 4 standard deviations of sampling's
				// error once there are samples enough to tell. The rest is
				// Ruby starting: 12% of the process started under the agent
				// in one CI run on a busy machine.
				h, l := sh["Shares#heavy"], sh["Shares#light"]
				if h <= l || h+l < 0.8 || total >= 100 && (h < 0.6 || h > 0.9) {
					t.Errorf("pid %d: Shares#heavy %.2f, Shares#light %.2f of the samples; want about 0.75, 0.25", cmd, h, l)
				}
			}
			p := all[0]
			for _, k := range []string{"process.pid", "process.executable.path", "process.runtime.version", "host.name", "service.name"} {
				if _, ok := p.Resource[k]; !ok {
					t.Errorf("resource without %s: %v", k, p.Resource)
				}
			}
			if p.Resource["deployment.environment"] != "test" || p.Resource["process.runtime.name"] != "ruby" ||
				!strings.HasPrefix(p.Resource["process.runtime.version"].(string), "3.3.") {
				t.Errorf("resource %v", p.Resource)
			}
			if p.SampleType != "samples/count" || p.PeriodType != "cpu/nanoseconds" || p.Period != int64(time.Second)/99 {
				t.Errorf("sample type %s, period %s %d", p.SampleType, p.PeriodType, p.Period)
			}
			// Native frames come with their mapping, and its build-id.
			native := 0
			for _, s := range p.Samples {
				for _, f := range s.Frames {
					if f.Type == "native" && f.Mapping != "" && f.BuildID != "" && f.Function != "" {
						native++
					}
				}
			}
			if native == 0 {
				t.Errorf("no native frame with a mapping and a build-id in %+v", p.Samples)
			}
		})
	}
}

// distinct is the samples of each distinct request received, by the ID of
// its first profile: a request the agent sent again, its answer lost with a
// killed collector, comes twice.
func distinct(t *testing.T, c *otelcoltest.Collector) map[string]int64 {
	t.Helper()
	pds, err := c.Received()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, pd := range pds {
		profs, err := otelcoltest.Flatten(pd)
		if err != nil {
			t.Fatal(err)
		}
		if len(profs) == 0 {
			continue
		}
		if _, dup := out[profs[0].ID]; dup {
			continue
		}
		var n int64
		for _, p := range profs {
			for _, s := range p.Samples {
				n += s.Values[0]
			}
		}
		out[profs[0].ID] = n
	}
	return out
}

// TestAgentCollectorDown: a collector killed mid-run and started again
// loses nothing while the outage fits the queue, and no more than the
// queue's bound past it; every sample is accounted for, sent or counted
// as dropped.
func TestAgentCollectorDown(t *testing.T) {
	for _, c := range []struct {
		name   string
		queue  int
		outage time.Duration
	}{
		{"outage within the queue", 60, 4 * time.Second},
		{"outage past the queue", 2, 6 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := testruby.Get(t, testRuby)
			col := otelcoltest.Start(t)
			testruby.Start(t, r, script("shares.rb"))
			stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: col.GRPCAddr, Insecure: true},
				Interval: time.Second, QueueSize: c.queue})
			time.Sleep(2500 * time.Millisecond)
			col.Kill()
			time.Sleep(c.outage)
			col.Restart(t)
			time.Sleep(4 * time.Second)
			st := stop()
			t.Logf("stats %+v\nlog:\n%s", *st, log)
			received := distinct(t, col)
			var samples int64
			for _, n := range received {
				samples += n
			}
			// A request the collector took just before it was killed, its
			// answer lost, is one the agent cannot know arrived: it keeps it,
			// and may drop it from the queue later. One kill: at most one
			// such request, and the samples counted twice are its own.
			twice := int64(len(received)) + int64(st.Dropped) - int64(st.Requests)
			if twice < 0 || twice > 1 || st.Unsent != 0 || st.Rejected != 0 {
				t.Errorf("%d requests: %d received, %d dropped, %d unsent, %d rejected", st.Requests, len(received), st.Dropped, st.Unsent, st.Rejected)
			}
			over := samples + int64(st.DroppedSamples) - int64(st.Samples)
			switch {
			case twice == 0 && over != 0, twice == 1 && !slices.Contains(slices.Collect(maps.Values(received)), over):
				t.Errorf("%d samples taken: %d received, %d dropped with their intervals (%d requests both)", st.Samples, samples, st.DroppedSamples, twice)
			}
			// The outage's intervals past the queue's bound are what may go,
			// and those of the wait to try again (at most an interval) and to
			// connect again.
			outage := uint64(c.outage/time.Second) + 2
			bound := uint64(0)
			if outage > uint64(c.queue) {
				bound = outage - uint64(c.queue)
			}
			if st.Dropped > bound {
				t.Errorf("%d intervals dropped; an outage of %s with a queue of %d may lose %d", st.Dropped, c.outage, c.queue, bound)
			}
			if c.queue < int(outage) && st.Dropped == 0 {
				t.Errorf("nothing dropped though the outage outlasted the queue: the queue is not bounded")
			}
			if !strings.Contains(log.String(), "cannot send") || !strings.Contains(log.String(), "reachable again") {
				t.Errorf("the log does not say the collector went and came back")
			}
		})
	}
}

// fakeContainer makes a cgroup named as a container runtime names its
// containers' (a 64-hex-digit id) and returns the file that moves a
// process into it, and the id.
func fakeContainer(t *testing.T) (procs, id string) {
	t.Helper()
	id = fmt.Sprintf("%064x", time.Now().UnixNano())
	// cgroup v2 (one hierarchy), or v1's pids controller.
	var errs []error
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified"} {
		dir := filepath.Join(root, "rubyperf-test", "docker-"+id+".scope")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		procs = filepath.Join(dir, "cgroup.procs")
		if _, err := os.Stat(procs); err != nil {
			errs = append(errs, err)
			os.Remove(dir)
			continue
		}
		t.Cleanup(func() {
			// Empty once its processes are gone: then it can go.
			for range 50 {
				if os.Remove(dir) == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			os.Remove(filepath.Dir(dir))
		})
		return procs, id
	}
	testskip.Privileged(t, fmt.Errorf("make a cgroup under /sys/fs/cgroup: %w", errors.Join(errs...)))
	return "", ""
}

// TestAgentProcessesComeAndGo: Ruby processes that start and exit while
// the agent runs each get profiles, with their own resource (a process in
// a container names it), and the agent sends every interval.
func TestAgentProcessesComeAndGo(t *testing.T) {
	r := testruby.Get(t, testRuby)
	col := otelcoltest.Start(t)
	procs, id := fakeContainer(t)
	stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: col.GRPCAddr, Insecure: true}, Interval: time.Second})
	time.Sleep(500 * time.Millisecond)
	var pids []int
	contained := 0
	for i := range 6 {
		var cmd *exec.Cmd
		if i == 3 {
			// Into the container first, then Ruby (exec keeps the pid).
			cmd = exec.Command("sh", "-c", `echo $$ > "$1" && exec "$2" "$3" 1.5`, "sh", procs, r.Exe, script("shares.rb"))
		} else {
			cmd = exec.Command(r.Exe, script("shares.rb"), "1.5")
		}
		testruby.StartCommand(t, cmd)
		pids = append(pids, cmd.Process.Pid)
		if i == 3 {
			contained = cmd.Process.Pid
		}
		time.Sleep(700 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	st := stop()
	t.Logf("stats %+v\nlog:\n%s", *st, log)
	got := received(t, col)
	if uint64(len(got)) != st.Requests || st.Sent != st.Requests || st.Processes != len(pids) {
		t.Fatalf("%d requests received; agent: %+v", len(got), *st)
	}
	var all []otelcoltest.Profile
	for _, profs := range got {
		all = append(all, profs...)
	}
	for _, pid := range pids {
		sh, total := shares(all, pid, "Shares#heavy", "Shares#light")
		// Fewer than 99 a second on a busy machine, but some.
		if total < 15 || sh["Shares#heavy"] <= sh["Shares#light"] {
			t.Errorf("pid %d, 1.5 s of Ruby: %d samples, %v", pid, total, sh)
		}
	}
	for _, p := range all {
		pid := p.Resource["process.pid"]
		cid, has := p.Resource["container.id"]
		switch {
		case pid == int64(contained) && cid != id:
			t.Errorf("pid %d runs in container %s; its resource says %v", contained, id, cid)
		case pid != int64(contained) && has:
			t.Errorf("pid %v is in no container; its resource says %v", pid, cid)
		}
	}
}

// TestAgentViews: the view flags reach the profiles: --ruby-only sends Ruby
// frames and C methods alone; --native also the interpreter's own frames,
// which the default view folds away.
func TestAgentViews(t *testing.T) {
	r := testruby.Get(t, testRuby)
	testruby.Start(t, r, script("shares.rb"))
	frames := func(view merge.View) map[string]int {
		col := otelcoltest.Start(t)
		stop, _ := startAgent(t, Options{Endpoint: Endpoint{Address: col.GRPCAddr, Insecure: true}, Interval: time.Second,
			Merge: merge.Options{View: view}})
		time.Sleep(2500 * time.Millisecond)
		stop()
		types := map[string]int{}
		for _, profs := range received(t, col) {
			for _, p := range profs {
				for _, s := range p.Samples {
					for _, f := range s.Frames {
						types[f.Type]++
						if f.Function == "vm_exec_core" || f.Function == "rb_vm_exec" {
							types["interpreter"]++
						}
					}
				}
			}
		}
		return types
	}
	if got := frames(merge.ViewRubyOnly); got["ruby"] == 0 || got["native"]+got["kernel"] > 0 {
		t.Errorf("--ruby-only: frames by type %v, want Ruby frames alone", got)
	}
	if got := frames(merge.ViewRuby); got["ruby"] == 0 || got["interpreter"] > 0 {
		t.Errorf("the default view: frames by type %v, want no interpreter frame", got)
	}
	if got := frames(merge.ViewNative); got["ruby"] == 0 || got["interpreter"] == 0 {
		t.Errorf("--native: frames by type %v, want the interpreter's frames too", got)
	}
}
