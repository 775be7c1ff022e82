package recording

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
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

// TestRecordedStacksMatchRuby: a recording of a parked scenario (spinning in
// place) reads back, sample by sample, as Ruby's own answer for the parked
// stack (rb_profile_frames), on every test Ruby (and the musl ones), interpreted and under each
// JIT it has. bindings.rb holds frames whose environment chains (10, 20, 50
// environments) are longer than the BPF walk follows, through
// define_method, instance_exec and method_missing: they were named as their
// bare block label, or unknown, before the recorder walked on from where the
// program stopped.
func TestRecordedStacksMatchRuby(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	t.Setenv("RUBYPERF_SPIN", "1")
	runs := testruby.RunsWithMusl(t)
	for _, ru := range runs {
		t.Run(ru.Name(), func(t *testing.T) {
			ru.Setenv(t)
			r := ru.Ruby
			script, _ := filepath.Abs(filepath.Join("..", "testdata", "ruby", "bindings.rb"))
			args := append(append(ru.Args[:len(ru.Args):len(ru.Args)], rubyoracle.Args(t, r.Exe)...), script)
			cmd, lines := testruby.StartOutput(t, r, args...)
			var answer struct {
				Frames []struct {
					Label string
					Path  *string
					Line  int64
				}
			}
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &answer) != nil || len(answer.Frames) < 2 {
				t.Fatalf("oracle answered %q", lines)
			}
			// Parked, Ruby's answer has Kernel#sleep on top; spinning,
			// Oracle.park is the top frame, on the same line.
			var want []string
			for i, f := range answer.Frames[1:] {
				path := ""
				if f.Path != nil {
					path = *f.Path
				}
				line := f.Line
				if i == 0 && ru.JIT.Name != "" {
					line = -1 // JIT code runs the top frame: its line is not told
				}
				want = append(want, fmt.Sprintf("%s %s:%d", f.Label, path, line))
			}
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			sum, err := Record(context.Background(), Options{PIDs: []int{cmd.Process.Pid}, Frequency: 499,
				Duration: 1500 * time.Millisecond, Output: out})
			if err != nil {
				t.Fatal(err)
			}
			samples, bad, emitting := 0, 0, 0
			_, err = readback.ReadStacks(out, readback.ReadOptions{Merge: merge.Options{View: merge.ViewRubyOnly}}, func(s merge.Stack) error {
				samples++
				var got []string
				for i, f := range s.Frames {
					line := f.Line
					if i == 0 && ru.JIT.Name != "" {
						line = -1
					}
					got = append(got, fmt.Sprintf("%s %s:%d", f.Name, f.File, line))
				}
				g, w := strings.Join(got, "\n"), strings.Join(want, "\n")
				switch {
				case g == w:
				case strings.HasSuffix(g, "\n"+strings.Join(want[1:], "\n")) && strings.Contains(g, "Oracle.emit"):
					emitting++ // still returning from printing the answer
				default:
					if bad++; bad == 1 {
						t.Errorf("a sample\n%s\nRuby says\n%s", g, w)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d samples (%d still returning from the answer), %d differ; summary: %d frames not named", samples, emitting, bad, sum.FramesNotNamed)
			if bad > 0 || samples-emitting < 100 {
				t.Errorf("%d of %d samples differ from Ruby's answer (want 0 of at least 100)", bad, samples-emitting)
			}
		})
	}
}
