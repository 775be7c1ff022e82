package rubystack

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestSnapshotRunningProcess snapshots the busy bundled workload many times.
// Without stopping it, every snapshot completes and what could not be read
// consistently is marked and counted, never fatal. Frozen, nothing is torn.
func TestSnapshotRunningProcess(t *testing.T) {
	for _, c := range []struct {
		ruby   string
		freeze bool
	}{{"debian-3.1", false}, {"source-3.3-static", false}, {"debian-3.1", true}, {"source-3.3-static", true}} {
		name := c.ruby + map[bool]string{true: "/frozen", false: "/nonblocking"}[c.freeze]
		t.Run(name, func(t *testing.T) {
			script, _ := filepath.Abs("../testdata/ruby/workload.rb")
			cmd := testruby.Start(t, testruby.Get(t, c.ruby), script)
			r := liveReader(t, cmd.Process.Pid)
			const n = 300
			frames, unknown, seenFib := 0, 0, false
			start := time.Now()
			for i := 0; i < n; i++ {
				var thaw = func() {}
				if c.freeze {
					var err error
					thaw, err = Freeze(r.PID)
					testskip.Privileged(t, err)
				}
				stacks, err := r.Snapshot()
				thaw()
				if err != nil {
					testskip.Privileged(t, fmt.Errorf("snapshot %d: %w", i, err))
				}
				time.Sleep(time.Millisecond) // let it run between snapshots
				if len(stacks) != 2 {
					t.Fatalf("snapshot %d: %d threads, want 2", i, len(stacks))
				}
				for _, s := range stacks {
					frames += len(s.Frames)
					for _, f := range s.Frames {
						seenFib = seenFib || f.Label == "Fib.fib"
						if f.Unknown {
							unknown++
							if f.Label != UnknownLabel {
								t.Errorf("unknown frame labelled %q", f.Label)
							}
						}
					}
				}
			}
			// Back-to-back freezes can starve the main thread of the GVL, so
			// only the non-blocking runs must catch the hot method.
			if !seenFib && !c.freeze {
				t.Error("never saw Fib.fib in the running workload")
			}
			t.Logf("%d snapshots in %v: %d frames, %d unknown, %d walks still moving after retries",
				n, time.Since(start).Round(time.Millisecond), frames, r.Stats.UnknownFrames, r.Stats.Moved)
			if unknown != r.Stats.UnknownFrames {
				t.Errorf("%d frames marked unknown, %d counted", unknown, r.Stats.UnknownFrames)
			}
			if c.freeze && (unknown != 0 || r.Stats.Moved != 0) {
				t.Errorf("frozen process: %d unknown frames, %d moving walks", unknown, r.Stats.Moved)
			}
		})
	}
}
