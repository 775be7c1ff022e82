package symtab

import (
	"testing"

	"github.com/rubyperf/rubyperf/payload"
)

// TestLinked: which pairs of checks that found old objects at an address
// found the same objects, by the rules of a generational GC that promotes
// after three markings, frees old objects only in a major GC's sweep, and
// compacts only in a major GC, after its marking, stamped compacting.
func TestLinked(t *testing.T) {
	st := func(count, epoch uint64, marking bool) payload.GCStamp {
		return payload.GCStamp{Stamped: true, Count: count, Epoch: epoch, Marking: marking}
	}
	// Epochs 3 and 20 are the first and second major GCs, 30 the fourth;
	// the reader never saw epoch 8 or 40.
	known := majorsAt{3: 1, 20: 2, 30: 4}
	sample := func(s payload.GCStamp) Check { return SampleCheck(s, known) }
	for _, c := range []struct {
		name string
		a, b Check
		want bool
	}{
		{"same interval", sample(st(7, 3, false)), sample(st(7, 3, false)), true},
		{"three minor GCs since", sample(st(7, 3, false)), sample(st(10, 3, false)), true},
		{"many minor GCs since, in the epoch", sample(st(7, 3, false)), sample(st(40, 3, false)), true},
		{"many GCs since a sample while the epoch's major GC marked", sample(st(3, 3, true)), sample(st(40, 3, false)), false},
		{"two GCs since a sample while the epoch's major GC marked", sample(st(3, 3, true)), sample(st(5, 3, false)), true},
		{"three GCs since a sample while the epoch's major GC marked", sample(st(3, 3, true)), sample(st(6, 3, false)), false},
		{"a read before the epoch's major GC swept", Check{st: st(3, 3, false)}, Check{st: st(40, 3, false)}, false},
		{"a read once it swept", Check{st: st(3, 3, false), safe: true}, Check{st: st(40, 3, false)}, true},
		{"a major GC since, still marking", sample(st(7, 3, false)), sample(st(8, 8, true)), true},
		{"a major GC since, done marking: it may have compacted", sample(st(7, 3, false)), sample(st(8, 8, false)), false},
		{"a major GC since, then a minor one", sample(st(7, 3, false)), sample(st(9, 8, false)), false},
		{"the next major GC, still marking, many GCs since", sample(st(7, 3, false)), sample(st(20, 20, true)), true},
		{"the next major GC, done marking", sample(st(7, 3, false)), sample(st(21, 20, false)), false},
		{"two major GCs since, the second marking", sample(st(25, 20, false)), sample(st(30, 30, true)), false},
		{"a major GC marking, whose count the reader did not see", sample(st(7, 3, false)), sample(st(40, 40, true)), false},
		{"sampled while its epoch's major GC marked, then the next one marking", sample(st(3, 3, true)), sample(st(20, 20, true)), false},
		{"compacting", sample(st(7, 3, false)), sample(payload.GCStamp{Stamped: true, Count: 7, Epoch: 3, Compacting: true}), false},
		{"out of order", sample(st(9, 3, false)), sample(st(7, 3, false)), false},
		{"unstamped", sample(payload.GCStamp{}), sample(st(7, 3, false)), false},
	} {
		if got := linked(c.a, c.b); got != c.want {
			t.Errorf("%s: linked(%+v, %+v) = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
	}
}

// TestOldCheckRun: a run takes checks linked to its ends, in any order,
// and refuses one that is not.
func TestOldCheckRun(t *testing.T) {
	st := func(count, epoch uint64) payload.GCStamp {
		return payload.GCStamp{Stamped: true, Count: count, Epoch: epoch}
	}
	r := OldRun{lo: SampleCheck(st(10, 3), majorsAt{}), hi: SampleCheck(st(10, 3), majorsAt{})}
	for _, c := range []struct {
		st   payload.GCStamp
		want bool
	}{
		{st(12, 3), true}, {st(30, 3), true}, {st(8, 3), true}, {st(20, 3), true},
		{st(31, 31), false}, // a major GC since, done marking
		{st(2, 2), false},   // before the epoch's major GC
	} {
		if got := r.Extend(SampleCheck(c.st, majorsAt{})); got != c.want {
			t.Errorf("run %+v..%+v takes %+v: %v, want %v", r.lo.st, r.hi.st, c.st, got, c.want)
		}
	}
	if r.lo.st.Count != 8 || r.hi.st.Count != 30 {
		t.Errorf("run spans %d..%d, want 8..30", r.lo.st.Count, r.hi.st.Count)
	}
}

// majorsAt is what a reader saw of a process's major GCs: the count at each
// epoch it saw.
type majorsAt map[uint64]uint64

func (m majorsAt) MajorsAt(epoch uint64) (uint64, bool) {
	n, ok := m[epoch]
	return n, ok
}
