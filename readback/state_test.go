package readback

import (
	"testing"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/payload"
)

// TestThreadState: the rules from facts to a state, case by case; the
// real-process tests (cmd/rubyperf TestState*) check them on Rubies.
func TestThreadState(t *testing.T) {
	exact := func(f payload.ThreadFacts) payload.ThreadFacts { f.GVLKnown, f.RegionKnown = true, true; return f }
	table := func(f payload.ThreadFacts) payload.ThreadFacts { f.GVLKnown, f.GVLLast = true, true; return f }
	for _, c := range []struct {
		name string
		f    payload.ThreadFacts
		topC bool
		want merge.State
	}{
		{"owner running Ruby", exact(payload.ThreadFacts{GVLHeld: true}), false, merge.StateRuby},
		{"owner in a C method", exact(payload.ThreadFacts{GVLHeld: true}), true, merge.StateC},
		{"owner collecting", exact(payload.ThreadFacts{GVLHeld: true, GCRunning: true}), false, merge.StateGC},
		{"GC elsewhere, C without the GVL", exact(payload.ThreadFacts{InRegion: true, GCRunning: true}), true, merge.StateC},
		{"GC elsewhere, this one waits", exact(payload.ThreadFacts{GCRunning: true}), false, merge.StateGVL},
		{"taking the GVL", exact(payload.ThreadFacts{}), false, merge.StateGVL},
		{"off: sleeping", exact(payload.ThreadFacts{InRegion: true, OffCPU: true}), true, merge.StateBlocked},
		{"off: waiting for the GVL", exact(payload.ThreadFacts{OffCPU: true}), true, merge.StateGVL},
		{"off: blocked holding the GVL", exact(payload.ThreadFacts{GVLHeld: true, OffCPU: true}), true, merge.StateBlocked},
		{"off: preempted owner", exact(payload.ThreadFacts{GVLHeld: true, OffCPU: true, Preempted: true}), false, merge.StateRuby},
		{"off: preempted in a region", exact(payload.ThreadFacts{InRegion: true, OffCPU: true, Preempted: true}), true, merge.StateC},
		{"table: last taker on the CPU", table(payload.ThreadFacts{GVLHeld: true}), false, merge.StateRuby},
		{"table: last taker collecting", table(payload.ThreadFacts{GVLHeld: true, GCRunning: true}), false, merge.StateGC},
		{"table: not the last taker, Ruby", table(payload.ThreadFacts{}), false, merge.StateGVL},
		{"table: not the last taker, C", table(payload.ThreadFacts{}), true, merge.StateC},
		{"table: off, last taker", table(payload.ThreadFacts{GVLHeld: true, OffCPU: true}), true, merge.StateOffCPU},
		{"table: off, not last taker", table(payload.ThreadFacts{OffCPU: true}), false, merge.StateOffCPU},
		{"table: off, GC under way", table(payload.ThreadFacts{GVLHeld: true, GCRunning: true, OffCPU: true}), false, merge.StateOffCPU},
		{"table: preempted", table(payload.ThreadFacts{OffCPU: true, Preempted: true}), true, merge.StateC},
		{"nothing read", payload.ThreadFacts{}, false, merge.StateUnknown},
		{"nothing read, off", payload.ThreadFacts{OffCPU: true}, false, merge.StateOffCPU},
	} {
		if got := threadState(c.f, c.topC); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
