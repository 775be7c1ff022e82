package bpf

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	perf "github.com/elastic/go-perf"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/procmaps"
)

// TestNativeFramesEqualUnwind samples a deep, block-heavy Ruby on every
// test Ruby with both native unwinders at once: the program's walk over the
// unwind tables (Payload.Natives) and the kernel's stack copy, unwound
// afterwards by native.Unwind, the reference. Where both have a frame they
// must agree; the program's walk may stop early only for a reason it names,
// on at most 0.5% of samples.
func TestNativeFramesEqualUnwind(t *testing.T) {
	testskip.Privileged(t, Supported())
	script, err := testruby.RepoPath("testdata/ruby/nativedeep.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd := testruby.Start(t, r, script, "60")
			tg := prepare(t, cmd.Process.Pid)
			c := compareNative(t, tg.pid, tg.config, 16384)
			if float64(c.shorter) > 0.005*float64(c.samples) {
				t.Errorf("%d of %d samples stopped short (want <= 0.5%%)", c.shorter, c.samples)
			}
		})
	}
}

// TestNativeJITFrames is TestNativeFramesEqualUnwind under each JIT of
// each test Ruby (every method compiled on its first call): the program
// steps over the JIT's frames, which have no call frame information, by
// the return address above them, as native.Unwind does.
func TestNativeJITFrames(t *testing.T) {
	testskip.Privileged(t, Supported())
	script, err := testruby.RepoPath("testdata/ruby/nativedeep.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range testruby.WithJIT(t) {
		t.Run(run.Name(), func(t *testing.T) {
			cmd := testruby.Start(t, run.Ruby, append(append([]string{}, run.JIT.Args...), script, "60")...)
			tg := prepare(t, cmd.Process.Pid)
			c := compareNative(t, tg.pid, tg.config, 16384)
			if float64(c.shorter) > 0.005*float64(c.samples) {
				t.Errorf("%d of %d samples stopped short (want <= 0.5%%)", c.shorter, c.samples)
			}
			if c.jit == 0 {
				t.Errorf("no sample stepped over a JIT frame")
			}
		})
	}
}

// TestNativeSignalFrames samples a C program that spends much of its time
// deep in a signal handler (native/testdata/sighandler.c): the program's
// walk steps over the kernel's signal frame into the interrupted code, down
// to the thread's first frame, as native.Unwind does.
func TestNativeSignalFrames(t *testing.T) {
	testskip.Privileged(t, Supported())
	cc := testskip.Command(t, "gcc", "gcc")
	src, err := testruby.RepoPath("native/testdata/sighandler.c")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "sighandler")
	if out, err := exec.Command(cc, "-O1", "-fomit-frame-pointer", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(100 * time.Millisecond) // mapped and running
	// A process without Ruby: its samples carry no Ruby frames (the
	// configuration reads nothing), only the program's native walk.
	c := compareNative(t, cmd.Process.Pid, ProcessConfig{}, 16384)
	if c.shorter > 0 {
		t.Errorf("%d of %d samples stopped short", c.shorter, c.samples)
	}
	if c.signal < 40 {
		t.Errorf("only %d samples unwound through a signal frame", c.signal)
	}
}

// nativeComparison counts how the program's native walks compared with
// native.Unwind over the stack copy.
type nativeComparison struct {
	samples, same, deeper, shorter int
	signal                         int // walks that went through a signal frame to the first frame
	jit                            int // walks that stepped over a JIT frame to the first frame
}

// compareNative samples pid for 1.5 s with both unwinders: the program's
// walk over the unwind tables (Payload.Natives) and the kernel's stack
// copy of stack bytes, unwound afterwards by native.Unwind, the reference.
// Where both have a frame they must agree; the program's walk may stop
// early only for a reason it names (counted as shorter).
func compareNative(t *testing.T, pid int, cfg ProcessConfig, stack uint32) nativeComparison {
	t.Helper()
	s, err := Open(Options{Frequency: 499, StackSize: stack})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var maps native.Maps
	list := processMappings(t, pid)
	for _, m := range list {
		maps.Add(m)
	}
	objs := &native.Objects{}
	n, err := s.UnwindMappings(pid, list, objs)
	if n == 0 {
		t.Fatalf("no mapping with unwind rows: %v", err)
	}
	if err != nil {
		t.Logf("%d mappings with rows; %v", n, err)
	}
	if err := s.AddProcess(pid, cfg); err != nil {
		t.Fatal(err)
	}
	find := native.TableFinderOf(native.ArchX86_64, &maps, objs)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	stops := map[payload.NativeStop]int{}
	var c nativeComparison
	var frames int
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
		c.samples++
		stops[p.NativeStop]++
		ref := native.Unwind(nil, smp.RegsUser, smp.StackUser, &maps, objs)
		k := 0
		for k < len(p.Natives) && k < len(ref) && p.Natives[k] == ref[k].PC {
			k++
		}
		frames += len(p.Natives)
		switch {
		case k == len(p.Natives) && k == len(ref):
			c.same++
		case k == len(ref) && len(p.Natives) > k:
			c.deeper++ // the stack copy ended first
		case k == len(p.Natives) && p.NativeStop != payload.NativeOutermost:
			c.shorter++
			if c.shorter <= 5 {
				t.Logf("the program stopped (%v) after %d of %d frames, at %#x in %s", p.NativeStop, k, len(ref), p.Natives[k-1], ref[k-1].Mapping.Path)
			}
		default:
			t.Errorf("frame %d differs: program %#x, unwind %#x (%d vs %d frames, stop %v)", k, at(p.Natives, k), atPC(ref, k), len(p.Natives), len(ref), p.NativeStop)
		}
		if p.NativeStop == payload.NativeOutermost && throughSignalFrame(p.Natives, find) {
			c.signal++
		}
		if p.NativeStop == payload.NativeOutermost && len(p.Natives) > 1 {
			for _, pc := range p.Natives[:len(p.Natives)-1] {
				if m, ok := maps.Find(pc); ok && native.IsJITMapping(m) {
					c.jit++
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples: %d alike, %d deeper than the %d-byte copy, %d shorter, %d through a signal frame, %d over a JIT frame; %.0f native frames a sample; stops %v",
		c.samples, c.same, c.deeper, stack, c.shorter, c.signal, c.jit, float64(frames)/float64(max(c.samples, 1)), stops)
	if c.samples < 100 {
		t.Fatalf("only %d samples", c.samples)
	}
	return c
}

// throughSignalFrame tells whether a walk went through a signal frame.
func throughSignalFrame(pcs []uint64, find native.TableFinder) bool {
	for _, pc := range pcs[min(1, len(pcs)):] {
		if t, vaddr, ok := find(pc); ok {
			if r, ok := t.Lookup(vaddr - 1); ok && r.CFA == native.CFASignal {
				return true
			}
		}
	}
	return false
}

func at(pcs []uint64, i int) uint64 {
	if i < len(pcs) {
		return pcs[i]
	}
	return 0
}

func atPC(f []native.Frame, i int) uint64 {
	if i < len(f) {
		return f[i].PC
	}
	return 0
}

// processMappings reads a process's mappings as native's.
func processMappings(tb testing.TB, pid int) []native.Mapping {
	tb.Helper()
	pm, err := procmaps.Read(pid)
	if err != nil {
		tb.Fatal(err)
	}
	var list []native.Mapping
	for _, m := range pm {
		list = append(list, native.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, Path: m.Path,
			Exec: len(m.Perms) > 2 && m.Perms[2] == 'x'})
	}
	return list
}
