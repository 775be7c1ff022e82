package symtab

import (
	"testing"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

func TestSurvived(t *testing.T) {
	sample := func(count, epoch uint64, marking bool) payload.GCStamp {
		return payload.GCStamp{Stamped: true, Count: count, Epoch: epoch, Marking: marking}
	}
	now := func(count, epoch uint64, marking bool) rubystack.GCStamp {
		return rubystack.GCStamp{Count: count, Epoch: epoch, Marking: marking}
	}
	for _, c := range []struct {
		name   string
		sample payload.GCStamp
		now    rubystack.GCStamp
		ages   []int
		want   bool
	}{
		{"same interval: nothing freed", sample(10, 4, false), now(10, 4, false), []int{0, 0}, true},
		{"the next GC still marking: nothing swept", sample(10, 4, false), now(11, 4, true), []int{0, 3, 0}, true},
		{"the next GC swept: a new object is 0", sample(10, 4, false), now(11, 4, false), []int{1, 3, 1}, true},
		{"the next GC swept, an object still 0", sample(10, 4, false), now(11, 4, false), []int{1, 3, 0}, false},
		{"two GCs, the second marking: it may have aged a new one", sample(10, 4, false), now(12, 4, true), []int{1, 3, 1}, false},
		{"two GCs", sample(10, 4, false), now(12, 4, false), []int{2, 3, 2}, true},
		{"three GCs: old", sample(10, 4, false), now(13, 4, false), []int{3, 3, 3}, true},
		{"four GCs: a new one may be old", sample(10, 4, false), now(14, 4, false), []int{3, 3, 3}, false},
		{"sampled in a minor GC's marking: its frames were marked", sample(10, 4, true), now(11, 4, true), []int{0, 0}, true},
		{"sampled in a major GC's marking: it may free them", sample(10, 10, true), now(11, 10, false), []int{1, 1}, false},
		{"sampled in a major GC's marking, aged since", sample(10, 10, true), now(11, 10, false), []int{2, 2}, true},
		{"a major GC since, swept: it may have compacted", sample(10, 4, false), now(11, 11, false), []int{3, 3}, false},
		{"the one major GC since, still marking", sample(10, 4, false), now(11, 11, true), []int{0, 0}, true},
		{"a major GC still marking after another GC", sample(10, 4, false), now(12, 12, true), []int{3, 3}, false},
		{"the next major GC, still marking, after a minor one", sample(10, 4, false), now(13, 13, true), []int{3, 3}, true},
		{"the next major GC, still marking, an object young", sample(10, 4, false), now(13, 13, true), []int{3, 2}, false},
		{"a second major GC since, still marking", sample(10, 4, false), now(20, 20, true), []int{3, 3}, false},
		{"compacting", sample(10, 4, false), rubystack.GCStamp{Count: 10, Epoch: 4, Compacting: true}, []int{3}, false},
		{"unstamped sample", payload.GCStamp{}, now(10, 4, false), []int{3}, false},
		{"stamps going back", sample(10, 4, false), now(9, 4, false), []int{3}, false},
	} {
		// Epochs 4 and 13 are the first and second major GCs, 20 the fourth.
		if got := survived(c.sample, c.now, c.ages, majorsAt{4: 1, 13: 2, 20: 4}); got != c.want {
			t.Errorf("%s: survived(%+v, %+v, %v) = %v, want %v", c.name, c.sample, c.now, c.ages, got, c.want)
		}
	}
}
