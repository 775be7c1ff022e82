package recording

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/rubyoracle"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestMergedStacksGolden records each parked scenario (spinning in place)
// on the 3.1.2 build with a symbol table, and compares each thread's most
// frequent merged stack, root to leaf, with a golden file: Ruby frames read
// like Ruby's backtrace, and between them the C functions each C method
// called.
func TestMergedStacksGolden(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	t.Setenv("RUBYPERF_SPIN", "1")
	r := testruby.Get(t, "source-3.1-shared")
	for _, sc := range []string{"methods", "dynamic", "deep", "fiber", "threads"} {
		t.Run(sc, func(t *testing.T) {
			script, _ := filepath.Abs(filepath.Join("..", "testdata", "ruby", sc+".rb"))
			cmd := testruby.Start(t, r, append(rubyoracle.Args(t, r.Exe), script)...)
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			d := 1500 * time.Millisecond
			if sc == "threads" {
				d = 3 * time.Second // four threads take turns with the GVL
			}
			if _, err := Record(context.Background(), Options{PIDs: []int{cmd.Process.Pid}, Frequency: 299,
				Duration: d, Output: out}); err != nil {
				t.Fatal(err)
			}
			// Each sample in two views: every native frame, and the
			// default (what a Ruby developer reads). The thread's most
			// frequent stack is picked in the first and shown in both.
			type views struct{ native, ruby []string }
			byThread := map[string]*views{}
			for _, view := range []merge.View{merge.ViewNative, merge.ViewRuby} {
				_, err := readback.ReadStacks(out, readback.ReadOptions{Merge: merge.Options{View: view}}, func(s merge.Stack) error {
					v := byThread[s.Comm]
					if v == nil {
						v = &views{}
						byThread[s.Comm] = v
					}
					if view == merge.ViewNative {
						v.native = append(v.native, renderStack(s))
					} else {
						v.ruby = append(v.ruby, renderStack(s))
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			var b strings.Builder
			fmt.Fprintf(&b, "# %s.rb on Ruby 3.1.2 (shared libruby with symbols): each thread's most frequent\n", sc)
			fmt.Fprintf(&b, "# merged stack, root first, with every native frame (--native) and in the default view.\n")
			fmt.Fprintf(&b, "# Made by TestMergedStacksGolden -update; reviewed by hand.\n")
			names := make([]string, 0, len(byThread))
			for n := range byThread {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				v := byThread[n]
				if len(v.native) != len(v.ruby) {
					t.Fatalf("thread %s: %d samples with --native, %d in the default view", n, len(v.native), len(v.ruby))
				}
				counts := map[string]int{}
				for _, st := range v.native {
					counts[st]++
				}
				best, count := -1, 0
				for i, st := range v.native {
					if c := counts[st]; c > count || c == count && st < v.native[best] {
						best, count = i, c
					}
				}
				if count < 5 {
					// Every thread of these scripts parks in one stack for
					// the whole recording: too few samples of it is a
					// failure, not a thread to leave out of the comparison.
					t.Errorf("thread %s: its most frequent stack came %d times of %d samples, want 5 or more", n, count, len(v.native))
					continue
				}
				fmt.Fprintf(&b, "\nthread %s (--native)\n%s", n, v.native[best])
				fmt.Fprintf(&b, "\nthread %s (default view)\n%s", n, v.ruby[best])
			}
			golden := filepath.Join("testdata", "golden", sc+".txt")
			if *update {
				if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("%s differs (run with -update and review):\n%s", golden, b.String())
			}
		})
	}
}

// renderStack writes a stack root first, one frame a line, without
// addresses: Ruby frames with file and line, native ones with their object.
// Kernel frames (timer interrupts, page faults) are left out.
func renderStack(s merge.Stack) string {
	var b strings.Builder
	for i := len(s.Frames) - 1; i >= 0; i-- {
		f := s.Frames[i]
		switch f.Kind {
		case merge.KindRuby:
			fmt.Fprintf(&b, "  %-40s %s:%d\n", f.Name, filepath.Base(f.File), f.Line)
		case merge.KindCFunc:
			fmt.Fprintf(&b, "  %-40s (C method)\n", f.Name)
		case merge.KindNative:
			fmt.Fprintf(&b, "      %-36s %s\n", f.Name, filepath.Base(f.File))
		}
	}
	return b.String()
}
