package bpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	perf "github.com/elastic/go-perf"

	"github.com/rubyperf/rubyperf/internal/rubyoracle"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
)

// target is a live Ruby process prepared for sampling.
type target struct {
	pid    int
	reader *rubystack.Reader
	config ProcessConfig
}

func prepare(t *testing.T, pid int) target { return prepareTB(t, pid) }

func prepareTB(t testing.TB, pid int) target {
	t.Helper()
	p, err := rubystack.OpenProcess(pid, rubybuild.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mem := &rubystack.ProcessMemory{PID: pid}
	t.Cleanup(func() { mem.Close(); p.Close() })
	r, err := rubystack.NewReader(p, mem)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := rubystack.ThreadPointer(pid, pid)
	testskip.Privileged(t, err)
	off, err := p.CurrentECOffset(mem, p.Binary.Anchors(r.Layout).CurrentEC, tp, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFor(r.Layout, off)
	if err != nil {
		t.Fatal(err)
	}
	// Samples carry GC stamps where the layout says where the GC keeps its
	// counters, as recording's targets do.
	if os, err := r.Objspace(); err == nil {
		if err := cfg.StampGC(r.Layout, os); err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, rubystack.ErrNoGCStamps) {
		t.Fatal(err)
	}
	return target{pid: pid, reader: r, config: cfg}
}

// sample records targets for d and returns each thread's symbolized Ruby
// stacks, one per sample.
func sample(t *testing.T, d time.Duration, opts Options, targets ...target) (map[int][][]rubystack.Frame, Counts) {
	out, c, _ := sampleSvars(t, d, opts, targets...)
	return out, c
}

// frameCounts counts frames that took a road less travelled: a method
// entry the program sent as an svar holding it (a method that set $~), an
// environment chain it left to user space (longer than it follows).
type frameCounts struct{ svars, envs int }

// sampleSvars is sample, and also counts frames by frameCounts.
func sampleSvars(t *testing.T, d time.Duration, opts Options, targets ...target) (map[int][][]rubystack.Frame, Counts, frameCounts) {
	t.Helper()
	testskip.Privileged(t, Supported())
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	byPID := map[int]target{}
	for _, tg := range targets {
		if err := s.AddProcess(tg.pid, tg.config); err != nil {
			t.Fatal(err)
		}
		byPID[tg.pid] = tg
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := map[int][][]rubystack.Frame{}
	var fc frameCounts
	err = s.Run(ctx, func(rec Record) error {
		if rec.Header.Type != perf.RecordTypeSample {
			return nil
		}
		smp, err := sampleOf(s, rec)
		if err != nil {
			return err
		}
		tid := int(smp.Tid)
		p, err := payload.Decode(smp.Raw)
		if err != nil {
			return err
		}
		tg, ok := byPID[int(p.PID)]
		if !ok {
			return fmt.Errorf("sample of pid %d, not a target", p.PID)
		}
		if int(p.TID) != tid {
			return fmt.Errorf("payload tid %d, record tid %d", p.TID, tid)
		}
		// The parked stack's environments stay as they were sampled.
		fc.envs += p.WalkEnvs(func(f payload.Frame) (uint64, bool) {
			cme, _, err := tg.reader.EnvMethodEntry(f.Env)
			return cme, err == nil
		})
		for _, f := range p.Frames {
			if cme, err := tg.reader.LocalMethodEntry(f.CME); err == nil && cme != 0 && cme != f.CME {
				fc.svars++
			}
		}
		var frames []rubystack.Frame
		for _, rf := range p.RawFrames(tg.reader) {
			frames = append(frames, tg.reader.Symbolize(rf))
		}
		out[tid] = append(out[tid], frames)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return out, c, fc
}

// TestBPFStacksEqualSnapshot: for each scenario, spinning where the snapshot
// test parks, every BPF sample's Ruby stack equals rubyperf snapshot's for
// the same thread, on every test Ruby and the musl ones.
//
// Under YJIT (every test Ruby built with it, every method compiled on its
// first call) the frames are pushed by JIT code, which writes a frame's pc
// only before calls; the park loop itself may run in the interpreter, where
// YJIT 3.1 leaves its code (cmd/rubyperf's TestRecordUnderYJIT samples a
// loop that stays in JIT code).
func TestBPFStacksEqualSnapshot(t *testing.T) {
	t.Setenv("RUBYPERF_SPIN", "1")
	for _, ru := range testruby.RunsWithMusl(t) {
		r := ru.Ruby
		for _, sc := range []string{"methods", "dynamic", "deep", "threads", "fiber", "bindings"} {
			t.Run(ru.Name()+"/"+sc, func(t *testing.T) {
				ru.Setenv(t)
				script, _ := filepath.Abs(filepath.Join("..", "testdata", "ruby", sc+".rb"))
				args := append(append(ru.Args[:len(ru.Args):len(ru.Args)], rubyoracle.Args(t, r.Exe)...), script)
				cmd := testruby.Start(t, r, args...)
				tg := prepare(t, cmd.Process.Pid)
				samples, counts, fc := sampleSvars(t, 1500*time.Millisecond, DefaultOptions, tg)
				// dynamic.rb's missing_caller sets $~: its frame's method
				// entry is inside an svar, which the program resolves (a new
				// svar each call would be a new frame key each call).
				if fc.svars != 0 {
					t.Errorf("%d frames came with their method entry in an svar", fc.svars)
				}
				// bindings.rb's chains are longer than the program follows.
				if sc == "bindings" && fc.envs == 0 {
					t.Error("no frame came with its environment chain left to user space")
				}
				thaw, err := rubystack.Freeze(tg.pid)
				testskip.Privileged(t, err)
				stacks, err := tg.reader.Snapshot()
				thaw()
				if err != nil {
					t.Fatal(err)
				}
				if len(samples) == 0 {
					t.Fatalf("no samples (program counted %d)", counts.Samples)
				}
				compared := 0
				defer func() {
					t.Logf("%d samples compared, %d threads sampled, program counted %d", compared, len(samples), counts.Samples)
					if compared == 0 {
						t.Error("no sample of any parked thread")
					}
				}()
				for _, st := range stacks {
					got := samples[st.TID]
					if len(got) == 0 {
						continue // a thread waiting for the GVL the whole time
					}
					compared += len(got)
					want := labels(st.Frames)
					bad := 0
					// A thread prints its answer (and "ready") from
					// Oracle.emit, called on the line it then parks on.
					// Spinning threads hold the GVL for whole time slices,
					// so a thread may first run again well after sampling
					// began, still returning from emit: such a sample is the
					// parked stack with Oracle.emit's frames on top. Once
					// parked, a thread never calls emit again. Under YJIT
					// the parked top frame's line is 0 (it runs JIT code)
					// where, below emit, it has its line.
					for _, g := range got {
						l := labels(g)
						if l != want && returningFromEmit(g, st.Frames) {
							continue
						}
						if l != want {
							bad++
							if bad == 1 {
								t.Errorf("thread %d: a sample's stack\n%s\nsnapshot\n%s", st.TID, labels(g), want)
							}
						}
					}
					if bad > 0 {
						t.Errorf("thread %d: %d of %d samples differ from the snapshot", st.TID, bad, len(got))
					}
				}
			})
		}
	}
}

// returningFromEmit says whether got is the parked stack want with
// Oracle.emit's frames on top: the same frames below the top one, the same
// method and file at the top (its line aside), and Oracle.emit above it.
func returningFromEmit(got, want []rubystack.Frame) bool {
	if len(want) == 0 || len(got) <= len(want) {
		return false
	}
	above := got[:len(got)-len(want)]
	top, rest := got[len(got)-len(want)], got[len(got)-len(want)+1:]
	if labels(rest) != labels(want[1:]) || top.Label != want[0].Label || top.Path != want[0].Path {
		return false
	}
	return strings.Contains(labels(above), "Oracle.emit ")
}

func labels(fs []rubystack.Frame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s %s:%d\n", f.Label, f.Path, f.Line)
	}
	return b.String()
}

// TestTruncation: a stack deeper than payload.MaxFrames comes in its top MaxFrames
// frames with the truncation flag, and the program counts it; a stack just
// under the limit is whole.
func TestTruncation(t *testing.T) {
	testskip.Privileged(t, Supported())
	r := testruby.Get(t, "source-3.3-static")
	script, _ := filepath.Abs("../testdata/ruby/depth.rb")
	for _, c := range []struct {
		depth     int
		truncated bool
	}{{3000, true}, {2000, false}} {
		t.Run(fmt.Sprint(c.depth), func(t *testing.T) {
			cmd := testruby.Start(t, r, script, fmt.Sprint(c.depth))
			tg := prepare(t, cmd.Process.Pid)
			s, err := Open(DefaultOptions)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.AddProcess(tg.pid, tg.config); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			n := 0
			err = s.Run(ctx, func(rec Record) error {
				if rec.Header.Type != perf.RecordTypeSample {
					return nil
				}
				smp, err := sampleOf(s, rec)
				if err != nil {
					return err
				}
				p, err := payload.Decode(smp.Raw)
				if err != nil {
					return err
				}
				n++
				if got := p.Flags&payload.Truncated != 0; got != c.truncated {
					t.Errorf("truncated flag %v with %d frames", got, len(p.Frames))
				}
				if c.truncated && len(p.Frames) != payload.MaxFrames {
					t.Errorf("%d frames, want the top %d", len(p.Frames), payload.MaxFrames)
				}
				if !c.truncated && len(p.Frames) < c.depth {
					t.Errorf("%d frames of a %d-deep stack", len(p.Frames), c.depth)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			counts, _ := s.Counts()
			if n == 0 || (counts.Truncated > 0) != c.truncated {
				t.Errorf("%d samples, %d counted truncated", n, counts.Truncated)
			}
		})
	}
}

func TestRingPagesFor(t *testing.T) {
	page := os.Getpagesize()
	for _, tc := range []struct{ ncpu, want int }{
		{0, sampleRingMax}, {1, sampleRingMax}, {2, sampleRingMax}, {16, sampleRingMax},
		{24, 1 << 20}, {64, 512 << 10}, {128, sampleRingMin}, {4096, sampleRingMin},
	} {
		got := RingPagesFor(tc.ncpu, sampleRingBudget, sampleRingMin, sampleRingMax) * page
		if got != tc.want && page == 4096 {
			t.Errorf("%d CPUs: %d bytes per ring, want %d", tc.ncpu, got, tc.want)
		}
		if n := RingPagesFor(tc.ncpu, sampleRingBudget, sampleRingMin, sampleRingMax); n&(n-1) != 0 {
			t.Errorf("%d CPUs: %d pages is not a power of two", tc.ncpu, n)
		}
	}
}

// TestSamplesCarryGCStamps: on a Ruby whose layout has the GC's counters,
// every sample carries the count of GCs the process had started and the
// count at its last major GC, as the process itself reads them: never
// before the count when recording began nor past the count after, never
// going back on a thread, the epoch never past the count.
func TestSamplesCarryGCStamps(t *testing.T) {
	testskip.Privileged(t, Supported())
	for _, r := range testruby.WithDWARF(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd := testruby.Start(t, r, "-e", `STDOUT.puts "ready"; STDOUT.flush
				i = 0
				loop { i += 1; (i % 50).zero? ? GC.start : 2_000.times { "x" * 64 } }`)
			tg := prepare(t, cmd.Process.Pid)
			if tg.config.GcSpan == 0 {
				t.Fatalf("%s carries DWARF, yet its configuration has no GC stamps", r.VM)
			}
			first, err := tg.reader.GCStamp()
			if err != nil {
				t.Fatal(err)
			}
			s, err := Open(Options{Frequency: 999})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.AddProcess(tg.pid, tg.config); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			type timed struct {
				time  uint64
				stamp payload.GCStamp
			}
			var got []timed
			err = s.Run(ctx, func(rec Record) error {
				if rec.Header.Type != perf.RecordTypeSample {
					return nil
				}
				smp, err := sampleOf(s, rec)
				if err != nil {
					return err
				}
				p, err := payload.Decode(smp.Raw)
				if err != nil {
					return err
				}
				if p.EC != 0 {
					got = append(got, timed{smp.Time, p.GC})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			last, err := tg.reader.GCStamp()
			if err != nil {
				t.Fatal(err)
			}
			// The rings are per CPU: in the order the samples were taken.
			sort.Slice(got, func(i, j int) bool { return got[i].time < got[j].time })
			stamps := make([]payload.GCStamp, len(got))
			for i, g := range got {
				stamps[i] = g.stamp
			}
			if len(stamps) < 300 {
				t.Fatalf("%d samples", len(stamps))
			}
			epochs := map[uint64]bool{}
			for i, st := range stamps {
				switch {
				case !st.Stamped:
					t.Fatalf("sample %d has no GC stamp", i)
				case st.Count < first.Count || st.Count > last.Count || st.Epoch > st.Count:
					t.Fatalf("sample %d: stamp %+v outside %+v .. %+v", i, st, first, last)
				case i > 0 && (st.Count < stamps[i-1].Count || st.Epoch < stamps[i-1].Epoch):
					t.Fatalf("sample %d: stamp %+v after %+v", i, st, stamps[i-1])
				}
				epochs[st.Epoch] = true
			}
			t.Logf("%d samples, GC count %d..%d, %d major GCs seen", len(stamps), stamps[0].Count, stamps[len(stamps)-1].Count, len(epochs))
			if last.Count-first.Count < 10 || len(epochs) < 3 {
				t.Errorf("GC count %d..%d, %d epochs: the workload's GCs were not seen", first.Count, last.Count, len(epochs))
			}
		})
	}
}
