package recording

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// livecodeParts is how many files livecode.rb may require: more than it
// gets to in its run.
const livecodeParts = 2000

// TestLiveCodeNamed: code that is live when sampled is named, though it is
// young (a file being required, a template compiled by eval for one render)
// and the GC runs while it is on the stack; and no frame is named wrongly:
// a block is named after the file or template of the frame it was called
// from (a name read from code that replaced it would not be). Samples
// taken while a minor GC marked are named though they are read after the
// marking ended (markedBySample); young code read after the next GC began
// is named where the object's age proves it survived (maxLiveUnnamedShare).
func TestLiveCodeNamed(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	// Debian's stripped 3.1 and 3.3, and a JIT: what people run. All the
	// test Rubies take a minute and a half.
	runs := []testruby.JITRun{{Ruby: testruby.Get(t, "debian-3.1")}, {Ruby: testruby.Get(t, "debian-3.3")}}
	// And a Ruby whose layout finds ages in heap pages (one with DWARF:
	// the built-in tables do not carry heap_page yet).
	for _, r := range testruby.WithDWARF(t) {
		if _, pages := agesKnown(t, r); pages {
			runs = append(runs, testruby.JITRun{Ruby: r})
			break
		}
	}
	if jit := testruby.WithJIT(t); len(jit) > 0 {
		runs = append(runs, jit[0])
	}
	script, _ := filepath.Abs(filepath.Join("..", "testdata", "ruby", "livecode.rb"))
	for _, ru := range runs {
		t.Run(ru.Name(), func(t *testing.T) {
			ru.Setenv(t)
			dir := t.TempDir()
			for i := 1; i <= livecodeParts; i++ {
				src := fmt.Sprintf("parts = (1..30_000).map { |x| \"part %d #{x}\" }\nPART_%d = parts.size\n", i, i)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part_%d.rb", i)), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append(append([]string{ru.Ruby.Exe}, ru.Args...), script, dir, "3")
			sum, err := Record(ctx, Options{Command: args, Frequency: 499, Output: out})
			if err != nil {
				t.Fatal(err)
			}
			if sum.CommandEnd != "" || CommandExitCode(sum.CommandState) != 0 {
				t.Fatalf("livecode.rb: %s %s", sum.CommandEnd, CommandStatus(sum.CommandState))
			}
			samples, unnamed, wrong, young := 0, 0, 0, 0
			_, err = readback.ReadStacks(out, readback.ReadOptions{Merge: merge.Options{View: merge.ViewRubyOnly}}, func(s merge.Stack) error {
				samples++
				bad, isYoung := false, false
				file := ""                                // the file or template of the Ruby frame it was called from
				for i := len(s.Frames) - 1; i >= 0; i-- { // root first
					f := s.Frames[i]
					if f.Kind != merge.KindRuby && f.Kind != merge.KindCFunc {
						continue
					}
					switch {
					case f.Name == rubystack.UnknownLabel || f.Name == symtab.ReplacedLabel:
						bad = true
					case strings.HasPrefix(f.File, dir) || strings.HasPrefix(f.File, "(template "):
						isYoung = true
						// Judged only under a named caller: one read as
						// unnamed has no file to compare with.
						if strings.HasPrefix(f.Name, "block ") && file != "" && f.File != file {
							if wrong++; wrong <= 5 {
								t.Errorf("frame %s %s:%d called from %s", f.Name, f.File, f.Line, file)
							}
						}
					}
					if f.Kind == merge.KindRuby {
						file = f.File
					}
				}
				if bad {
					unnamed++
				}
				if isYoung {
					young++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			share := 100 * float64(unnamed) / float64(max(samples, 1))
			t.Logf("%d samples, %d in young code, %d with an unnamed frame (%.2f%%), %d named wrongly", samples, young, unnamed, share, wrong)
			// Young code is a quarter to a half of the samples; 23% and
			// 15% in CI runs of YJIT on a loaded machine. Samples: about
			// 1,400 on a quiet machine, 419 in a CI run on a busy one.
			if samples < 300 || young < samples/10 || wrong > 0 {
				t.Errorf("%d samples, %d in young code, %d named wrongly; want at least 300, a tenth, 0", samples, young, wrong)
			}
			ceiling := maxLiveUnnamedShare
			if flags, pages := agesKnown(t, ru.Ruby); flags || pages {
				ceiling = maxLiveUnnamedShareAged
			}
			if share > ceiling {
				t.Errorf("%.2f%% of samples have an unnamed frame, want at most %.2f%%", share, ceiling)
			}
		})
	}
}

// agesKnown says where the layout a recording of r uses finds a young
// object's age: in its flags (up to 3.2), or in its heap page (from 3.3,
// with DWARF or a table that has heap_page).
func agesKnown(t *testing.T, r testruby.Ruby) (flags, pages bool) {
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
	_, _, flags = l.AgeBits()
	return flags, l.AgesInPages()
}

// maxLiveUnnamedShare bounds the samples of live code with an unnamed frame
// where the layout does not tell a young object's age (a built-in table of
// 3.3 or later): a ceiling against regressions, not the aim. Measured
// 2026-11-27: 3.0 to 6.7% (young code read after the next GC began); the
// aim is 0.1%.
const maxLiveUnnamedShare = 15.0

// maxLiveUnnamedShareAged bounds it where the layout tells an object's age,
// which proves young code survived the GCs between the sample and the read
// (symtab's survived). Measured 2026-11-27 on Debian's 3.1, with and without
// YJIT, and a 3.3 with DWARF: 0 to 0.5% (frames whose objects never age,
// being without write barriers, code redefined at the same address, or read
// while a second GC marked); with two busy CPUs besides, up to 2.8% (the
// recorder reads later, more GCs after the sample than ages can tell
// apart). The same Rubies read 3.3 to 6.6% on a quiet machine before.
// Measured 2026-11-29 on the 3.3 with DWARF (ages in heap pages): 0.2 to
// 0.6% quiet, 1.6 to 3.5% beside three busy loops on two CPUs, 4.44% in
// one clean-clone CI run (the other packages' tests running beside).
const maxLiveUnnamedShareAged = 6.0
