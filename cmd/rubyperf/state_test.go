package main

import (
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/recording"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// stateWeights is what a recording says each thread (by name, or "main")
// spent in each state, in ns, and under which innermost Ruby-level frame
// it was blocked.
type stateWeights struct {
	byThread  map[string]map[merge.State]uint64
	blockedAt map[string]map[string]uint64 // thread, innermost Ruby-level frame
	gcFrames  int                          // samples with a (garbage collection) frame
	phases    map[string]int               // GC phase frames seen
}

func (w stateWeights) share(thread string, s merge.State) float64 {
	var total uint64
	for _, v := range w.byThread[thread] {
		total += v
	}
	if total == 0 {
		return 0
	}
	return float64(w.byThread[thread][s]) / float64(total)
}

// recordStates runs testdata/ruby/states.rb MODE under r, recorded (wall:
// with --wall), and returns what the workload printed and the recording's
// state weights.
func recordStates(t *testing.T, r testruby.Ruby, mode string, wall bool, hz int) (map[string]any, stateWeights) {
	t.Helper()
	script, _ := filepath.Abs("../../testdata/ruby/states.rb")
	dir := t.TempDir()
	file := filepath.Join(dir, "rubyperf.data")
	out := filepath.Join(dir, "out.json")
	cmd := []string{"sh", "-c", "exec \"$0\" \"$1\" \"$2\" 3 > \"$3\"", r.Exe, script, mode, out}
	if _, err := recording.Record(context.Background(), recording.Options{
		Command: cmd, Frequency: hz, Wall: wall, Duration: 20 * time.Second, Output: file}); err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command("cat", out).Output()
	if err != nil || len(b) == 0 {
		t.Fatalf("%s printed nothing: %v", mode, err)
	}
	facts := map[string]any{}
	if err := json.Unmarshal(b, &facts); err != nil {
		t.Fatalf("%s: %v in %q", mode, err, b)
	}
	w := stateWeights{byThread: map[string]map[merge.State]uint64{}, blockedAt: map[string]map[string]uint64{},
		phases: map[string]int{}}
	if _, err := readback.ReadStacks(file, readback.ReadOptions{}, func(s merge.Stack) error {
		name := s.Comm
		if s.PID == s.TID {
			name = "main"
		}
		if w.byThread[name] == nil {
			w.byThread[name], w.blockedAt[name] = map[merge.State]uint64{}, map[string]uint64{}
		}
		w.byThread[name][s.State] += s.Period
		seenState := false
		for _, f := range s.Frames {
			switch {
			case f.Kind == merge.KindState && f.Name == merge.GCName:
				w.gcFrames++
				seenState = true
			case f.Kind == merge.KindState && strings.HasPrefix(f.Name, "("):
				w.phases[f.Name]++
				seenState = true
			case seenState && (f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc):
				if s.State == merge.StateBlocked || s.State == merge.StateOffCPU {
					w.blockedAt[name][f.Name] += s.Period
				}
				seenState = false
			}
			if f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc {
				break
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return facts, w
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// TestStateGC: an allocating thread's samples say (garbage collection), with
// its phase, in the share of its CPU time Ruby's own GC.stat(:time) says
// the GC took.
func TestStateGC(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	for _, r := range stateRubies(t) {
		t.Run(r.Name, func(t *testing.T) {
			facts, w := recordStates(t, r, "gc", false, 999)
			want := facts["gc_ms"].(float64) / facts["cpu_ms"].(float64)
			got := w.share("main", merge.StateGC)
			t.Logf("GC: %.1f%% of samples, GC.stat(:time) %.1f%% of CPU time; phases %v", 100*got, 100*want, w.phases)
			if !near(got, want, 0.05+0.2*want) {
				t.Errorf("GC share %.3f, the workload's %.3f", got, want)
			}
			if w.phases[merge.PhaseName("marking")] == 0 || w.phases[merge.PhaseName("sweeping")] == 0 {
				t.Errorf("GC phases seen: %v, want marking and sweeping", w.phases)
			}
		})
	}
}

// TestStateGVL: three CPU-bound threads share the GVL; recorded with
// --wall, each one waits for it two thirds of its time (the GVL goes round
// them in turn), and runs at least the CPU time it measured (it also holds
// the GVL while the kernel has it wait for a CPU). A Ruby whose layout
// cannot tell waiting for the GVL from being blocked off the CPU (no
// unblock.func: a table generated before it was read) shows that time as
// "off the CPU", never either; the built-in tables have it now.
func TestStateGVL(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	for _, r := range stateRubies(t) {
		t.Run(r.Name, func(t *testing.T) {
			tells := blockingRegion(t, r)
			facts, w := recordStates(t, r, "gvl", true, 99)
			for _, th := range facts["threads"].([]any) {
				th := th.(map[string]any)
				name := th["name"].(string)
				ran := th["cpu_ms"].(float64) / th["wall_ms"].(float64)
				got := w.share(name, merge.StateGVL)
				if !tells {
					if b := w.share(name, merge.StateBlocked); b > 0 {
						t.Errorf("%s: blocked %.3f of the time, on a layout that cannot tell", name, b)
					}
					got += w.share(name, merge.StateOffCPU)
				} else if off := w.share(name, merge.StateOffCPU); off > 0.01 {
					t.Errorf("%s: %.3f of the time off the CPU, neither blocked nor waiting, on a layout that tells", name, off)
				}
				running := w.share(name, merge.StateRuby) + w.share(name, merge.StateC)
				t.Logf("%s: waiting for the GVL %.1f%%, running %.1f%%; the thread was on a CPU %.1f%% of its time; states %v",
					name, 100*got, 100*running, 100*ran, w.byThread[name])
				if !near(got, 2.0/3, 0.1) {
					t.Errorf("%s: GVL wait share %.3f, want 2/3 with three threads taking turns", name, got)
				}
				if running < ran-0.05 {
					t.Errorf("%s: running %.3f of the time, less than the %.3f it was on a CPU", name, running, ran)
				}
			}
		})
	}
}

// TestStateBlocked: recorded with --wall, a sleeping thread is blocked in
// Kernel#sleep, and a thread waiting for a pipe in IO.select, each for the
// time the workload measured (off the CPU there, on a layout that cannot
// tell: blockingRegion).
func TestStateBlocked(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	for _, r := range stateRubies(t) {
		t.Run(r.Name, func(t *testing.T) {
			facts, w := recordStates(t, r, "block", true, 99)
			for _, c := range []struct {
				thread, frame, fact string
			}{{"sleeper", "Kernel#sleep", "slept_ms"}, {"reader", "IO.select", "waited_ms"}} {
				want := facts[c.fact].(float64) * 1e6
				got := float64(w.blockedAt[c.thread][c.frame])
				t.Logf("%s: blocked in %s %.0f ms, measured %.0f ms; states %v", c.thread, c.frame, got/1e6, want/1e6, w.byThread[c.thread])
				if !near(got, want, 0.15*want) {
					t.Errorf("%s: blocked in %s for %.0f ms, the workload measured %.0f ms (blocked at %v)",
						c.thread, c.frame, got/1e6, want/1e6, w.blockedAt[c.thread])
				}
			}
		})
	}
}

// blockingRegion says whether r's layout tells a thread in a blocking
// region (unblock.func) from one waiting for the GVL.
func blockingRegion(t *testing.T, r testruby.Ruby) bool {
	t.Helper()
	b, err := rubybuild.OpenBinary(r.VM, rubybuild.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Layout()
	if err != nil {
		t.Fatal(err)
	}
	return l.Capabilities.BlockingRegion
}

// stateRubies are the test Rubies the state tests run on: every one, with
// DWARF or stripped (their layouts from the built-in tables), and the musl
// ones.
func stateRubies(t *testing.T) []testruby.Ruby { return testruby.WithMusl(t) }
