//go:build pyroscope

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/profilerstate"
	"github.com/rubyperf/rubyperf/internal/pyroscopetest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// pyroscopeRoute is one way the agent's profiles reach Pyroscope.
type pyroscopeRoute struct {
	name string
	args func(srv *pyroscopetest.Server, col *otelcoltest.Collector) []string
	// query is the profile type the route's profiles are filed under.
	query string
	// knownRefusal, when set, is the message of a refusal that is not the
	// agent's to cure, with why: the route must be refused with it.
	knownRefusal, why string
}

var pyroscopeRoutes = []pyroscopeRoute{
	{"otlp-grpc", func(s *pyroscopetest.Server, _ *otelcoltest.Collector) []string {
		return []string{"--endpoint", s.Addr, "--insecure"}
	}, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "", ""},
	{"otlp-http", func(s *pyroscopetest.Server, _ *otelcoltest.Collector) []string {
		return []string{"--endpoint", s.Addr, "--protocol", "http", "--insecure"}
	}, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "", ""},
	{"collector", func(_ *pyroscopetest.Server, c *otelcoltest.Collector) []string {
		return []string{"--endpoint", c.GRPCAddr, "--insecure"}
	}, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "invalid label name ''",
		"the Collector's otlp exporter (go.mod's release, v0.163 on) encodes resource attribute keys by index into the string table " +
			"(KeyValue.key_strindex), which this Pyroscope's OTLP ingest does not read"},
	{"collector-v0.162", func(_ *pyroscopetest.Server, c *otelcoltest.Collector) []string {
		return []string{"--endpoint", c.GRPCAddr, "--insecure"}
	}, "process_cpu:cpu:nanoseconds:cpu:nanoseconds", "", ""},
	{"ingest-pprof", func(s *pyroscopetest.Server, _ *otelcoltest.Collector) []string {
		return []string{"--pyroscope", s.URL}
	}, "process_cpu:samples:count:cpu:nanoseconds", "", ""},
}

// TestAgentToPyroscope: the agent's profiles reach a real Grafana
// Pyroscope over OTLP/gRPC, OTLP/HTTP, through an OpenTelemetry Collector,
// and as pprof to its ingest API; queried back through Pyroscope's own
// API, the workload's method shares are within 2 points of a local
// `record` + `convert -f pprof` of the same process over the same time,
// and the series carry the service's name, the process's attributes, the
// samples' thread labels and a second process's request labels.
//
// make test-pyroscope (needs a Pyroscope: scripts/pyroscope.sh).
func TestAgentToPyroscope(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	bin := rubyperfBinary(t)
	srv := pyroscopetest.Start(t)
	// A Collector per release the routes name: go.mod's, and v0.162, the
	// last whose encoder writes attribute keys inline.
	cols := map[string]*otelcoltest.Collector{}
	for _, release := range []string{"", "v0.162"} {
		cols[release] = otelcoltest.StartWith(t, otelcoltest.Options{ForwardTo: srv.Addr, Release: release})
	}
	colOf := func(rt pyroscopeRoute) *otelcoltest.Collector {
		release, _ := strings.CutPrefix(rt.name, "collector")
		return cols[strings.TrimPrefix(release, "-")]
	}
	r := testruby.Get(t, "debian-3.3")
	token := fmt.Sprintf("rubyperf-pyroscope-%d", time.Now().UnixNano())
	dir := filepath.Join(t.TempDir(), token)
	testruby.CopyFile(t, filepath.Join("..", "..", "testdata", "ruby", "shares.rb"), filepath.Join(dir, "shares.rb"))
	target := testruby.Start(t, r, filepath.Join(dir, "shares.rb"))
	pid := target.Process.Pid
	// Beside it, requests on fibers labelled as the ruby-profiler gem does
	// (testdata/ruby/labels.rb): endpoint users, orders and search; on a
	// Ruby built from source, whose headers build the extension that
	// publishes them.
	testruby.CopyFile(t, profilerstate.WorkloadPath(t), filepath.Join(dir, "labels.rb"))
	lr := testruby.Get(t, "source-3.3-static")
	labelled := exec.Command(lr.Exe, filepath.Join(dir, "labels.rb"), "60", profilerstate.Build(t, lr))
	if err := labelled.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { labelled.Process.Kill(); labelled.Wait() })

	const secs = 12
	start := time.Now()
	var wg sync.WaitGroup
	logs := make([]bytes.Buffer, len(pyroscopeRoutes))
	errs := make([]error, len(pyroscopeRoutes))
	for i, rt := range pyroscopeRoutes {
		args := append([]string{"agent", "--interval", "2s", "-F", "99", "--match", token,
			"--service-name", "rubyperf-" + rt.name, "--label", "deployment.environment=test"}, rt.args(srv, colOf(rt))...)
		ag := exec.Command(bin, args...)
		ag.Stderr = &logs[i]
		if err := ag.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(secs * time.Second)
			ag.Process.Signal(syscall.SIGTERM)
			errs[i] = ag.Wait()
		}()
	}
	// The same process, recorded locally over the same seconds.
	local := filepath.Join(t.TempDir(), "local.data")
	var recErr bytes.Buffer
	rec := exec.Command(bin, "record", "-F", "99", "-p", strconv.Itoa(pid), "-d", strconv.Itoa(secs-1), "-o", local)
	rec.Stderr = &recErr
	if err := rec.Run(); err != nil {
		t.Fatalf("record: %v\n%s", err, recErr.String())
	}
	wg.Wait()
	until := time.Now()
	pb := local + ".pb.gz"
	if out, err := exec.Command(bin, "convert", "-f", "pprof", "-i", local, "-o", pb).CombinedOutput(); err != nil {
		t.Fatalf("convert: %v\n%s", err, out)
	}
	want := pprofShares(t, pb, "Shares#heavy", "Shares#light")
	t.Logf("local record + convert -f pprof: Shares#heavy %.3f, Shares#light %.3f", want["Shares#heavy"], want["Shares#light"])

	for i, rt := range pyroscopeRoutes {
		t.Run(rt.name, func(t *testing.T) {
			log := logs[i].String()
			t.Logf("agent log:\n%s", lastLines(log, 12))
			if rt.knownRefusal != "" {
				// A refusal docs/agent.md's table states: asserted, so that
				// the day it is accepted shows here.
				if strings.Contains(log, rt.knownRefusal) {
					t.Logf("refused, as known: %s", rt.why)
					return
				}
				t.Errorf("not refused with %q as docs/agent.md says (%s): update the table", rt.knownRefusal, rt.why)
			}
			if errs[i] != nil {
				t.Errorf("agent: %v", errs[i])
			}
			if strings.Contains(log, "refused") || strings.Contains(log, "rejected") && !strings.Contains(log, "0 rejected") {
				t.Errorf("the agent's requests were refused:\n%s", lastLines(log, 12))
			}
			selector := fmt.Sprintf(`{service_name="rubyperf-%s"}`, rt.name)
			var fl *pyroscopetest.Flame
			deadline := time.Now().Add(60 * time.Second)
			for {
				var err error
				fl, err = srv.Render(rt.query+selector, start.Add(-time.Minute), until.Add(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if fl.Ticks > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Second)
			}
			if fl.Ticks == 0 {
				types, _ := srv.LabelValues("__profile_type__", selector, start.Add(-time.Minute), until.Add(time.Minute))
				services, _ := srv.LabelValues("service_name", "{}", start.Add(-time.Minute), until.Add(time.Minute))
				if col := colOf(rt); col != nil {
					t.Logf("collector log:\n%s", lastLines(col.Log(), 20))
				}
				t.Fatalf("Pyroscope has no %s%s; it has types %q, services %q", rt.query, selector, types, services)
			}
			// The service holds the labelled process too: the two methods'
			// shares of their sum, there and in the local recording of
			// the shares process alone.
			gotSum := fl.Share("Shares#heavy") + fl.Share("Shares#light")
			wantSum := want["Shares#heavy"] + want["Shares#light"]
			for _, name := range []string{"Shares#heavy", "Shares#light"} {
				got, w := fl.Share(name)/gotSum, want[name]/wantSum
				t.Logf("%s: %.3f of the two in Pyroscope (of %d), %.3f locally", name, got, fl.Ticks, w)
				if d := got - w; d > 0.02 || d < -0.02 {
					t.Errorf("%s: %.3f of the two methods' samples in Pyroscope, %.3f locally: more than 2 points apart", name, got, w)
				}
			}
			names, err := srv.LabelNames(selector, start.Add(-time.Minute), until.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("label names: %q", names)
			has := func(alts ...string) bool {
				return slices.ContainsFunc(alts, func(a string) bool { return slices.Contains(names, a) })
			}
			for _, want := range [][]string{{"service_name"}, {"process.pid", "process_pid"},
				{"deployment.environment", "deployment_environment"}, {"thread.name", "thread_name", "thread"},
				{"ruby.thread.state", "ruby_thread_state", "thread_state"}} {
				if !has(want...) {
					t.Errorf("no label %s among %q", want[0], names)
				}
			}
			pids, err := srv.LabelValues(firstPresent(names, "process.pid", "process_pid"), selector, start.Add(-time.Minute), until.Add(time.Minute))
			if err != nil || !slices.Contains(pids, strconv.Itoa(pid)) || !slices.Contains(pids, strconv.Itoa(labelled.Process.Pid)) {
				t.Errorf("process pid values %q (%v), want %d and %d", pids, err, pid, labelled.Process.Pid)
			}
			// OTLP sample attributes name request labels ruby.label.KEY;
			// pprof labels, KEY.
			endpoint := firstPresent(names, "ruby.label.endpoint", "endpoint")
			endpoints, err := srv.LabelValues(endpoint, selector, start.Add(-time.Minute), until.Add(time.Minute))
			t.Logf("request label %s: %q", endpoint, endpoints)
			for _, e := range []string{"users", "orders", "search"} {
				if err != nil || !slices.Contains(endpoints, e) {
					t.Errorf("request label endpoint values %q (%v), want %s among them", endpoints, err, e)
				}
			}
		})
	}
}

func firstPresent(names []string, alts ...string) string {
	for _, a := range alts {
		if slices.Contains(names, a) {
			return a
		}
	}
	return alts[0]
}

// pprofShares is, for each name, the part of a pprof's samples with a
// frame of that function.
func pprofShares(t *testing.T, file string, names ...string) map[string]float64 {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	on := map[string]int64{}
	for _, s := range p.Sample {
		total += s.Value[0]
		seen := map[string]bool{}
		for _, l := range s.Location {
			for _, ln := range l.Line {
				if n := ln.Function.Name; slices.Contains(names, n) && !seen[n] {
					seen[n] = true
					on[n] += s.Value[0]
				}
			}
		}
	}
	out := map[string]float64{}
	for _, n := range names {
		if total > 0 {
			out[n] = float64(on[n]) / float64(total)
		}
	}
	return out
}
