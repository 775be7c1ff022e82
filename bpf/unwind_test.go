package bpf

import (
	"context"
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
			pid := cmd.Process.Pid
			tg := prepare(t, pid)
			s, err := Open(Options{Frequency: 499, StackSize: 16384})
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
			if err := s.AddProcess(pid, tg.config); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			stops := map[payload.NativeStop]int{}
			var samples, same, deeper, shorter int
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
				samples++
				stops[p.NativeStop]++
				ref := native.Unwind(nil, smp.RegsUser, smp.StackUser, &maps, objs)
				k := 0
				for k < len(p.Natives) && k < len(ref) && p.Natives[k] == ref[k].PC {
					k++
				}
				frames += len(p.Natives)
				switch {
				case k == len(p.Natives) && k == len(ref):
					same++
				case k == len(ref) && len(p.Natives) > k:
					deeper++ // the stack copy ended first
				case k == len(p.Natives) && p.NativeStop != payload.NativeOutermost:
					shorter++
					if shorter <= 5 {
						t.Logf("the program stopped (%v) after %d of %d frames, at %#x in %s", p.NativeStop, k, len(ref), p.Natives[k-1], ref[k-1].Mapping.Path)
					}
				default:
					t.Errorf("frame %d differs: program %#x, unwind %#x (%d vs %d frames, stop %v)", k, at(p.Natives, k), atPC(ref, k), len(p.Natives), len(ref), p.NativeStop)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d samples: %d alike, %d deeper than the 16 KiB copy, %d shorter; %.0f native frames a sample; stops %v",
				samples, same, deeper, shorter, float64(frames)/float64(max(samples, 1)), stops)
			if samples < 100 {
				t.Fatalf("only %d samples", samples)
			}
			if float64(shorter) > 0.005*float64(samples) {
				t.Errorf("%d of %d samples stopped short (want <= 0.5%%)", shorter, samples)
			}
		})
	}
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
