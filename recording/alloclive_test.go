package recording

import (
	"testing"

	"github.com/rubyperf/rubyperf/rubystack"
)

// TestJudgeLive: a slot read after GCs holds the sampled object only where
// its age proves it, and another object of the same class and type put
// there since never passes for it, though the GC may make a young object
// old at its first marking (one marked from an old object).
func TestJudgeLive(t *testing.T) {
	const str, klass = 5, 0x1000
	slot := func(age int) rubystack.SlotObject {
		return rubystack.SlotObject{Flags: str | 1<<13, Klass: klass, Age: age, AgeKnown: true}
	}
	allocated := gcPoint{count: 10, epoch: 8, safe: true}
	idle := gcPoint{count: 10, epoch: 8, idle: true}
	sweeping := gcPoint{count: 10, epoch: 8}
	sweepingMajor := gcPoint{count: 10, epoch: 10}
	at := func(count, epoch uint64) gcPoint { return gcPoint{count: count, epoch: epoch, idle: true} }
	for _, c := range []struct {
		name  string
		age   int
		proof gcPoint
		now   gcPoint
		slot  rubystack.SlotObject
		want  liveVerdict
	}{
		{"survived one GC", 0, allocated, at(11, 8), slot(1), liveProven},
		{"a newer object after one GC", 0, allocated, at(11, 8), slot(0), liveDead},
		{"two GCs: a successor may be made old at once", 0, allocated, at(12, 8), slot(2), liveUnproven},
		{"reused after the first of two", 0, allocated, at(12, 8), slot(1), liveDead},
		{"made old by its first GC", 0, allocated, at(11, 8), slot(3), liveProven},
		{"four GCs: old either way", 0, allocated, at(14, 8), slot(3), liveUnproven},
		{"from idle, one GC", 1, idle, at(11, 8), slot(2), liveProven},
		{"from a sweep, one GC: its sweep may have freed it", 1, sweeping, at(11, 8), slot(2), liveUnproven},
		{"from a sweep, none since", 1, sweeping, at(10, 8), slot(1), liveProven},
		{"from a sweep at age 0: its sweep may have freed it", 0, sweeping, at(11, 8), slot(1), liveUnproven},
		{"old, minors only", 3, idle, at(20, 8), slot(3), liveProven},
		{"old, a major next", 3, idle, at(11, 11), slot(3), liveProven},
		{"old, a major since, and another GC", 3, idle, at(12, 11), slot(3), liveUnproven},
		{"old, a major since, past three GCs", 3, idle, at(15, 11), slot(3), liveUnproven},
		{"old, read in a major's sweep, more GCs since", 3, sweepingMajor, at(14, 10), slot(3), liveUnproven},
		{"old, then young", 3, idle, at(12, 11), slot(0), liveDead},
		{"freed", 1, idle, at(11, 8), rubystack.SlotObject{}, liveGone},
		{"another class", 1, idle, at(11, 8), rubystack.SlotObject{Flags: str, Klass: 0x2000, Age: 2, AgeKnown: true}, liveGone},
		{"compacted since", 1, idle, gcPoint{count: 11, epoch: 11, idle: true, compacts: 1}, slot(2), liveUnproven},
		{"age unknown", 1, idle, at(11, 8), rubystack.SlotObject{Flags: str, Klass: klass}, liveUnproven},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &liveObject{klass: klass, typ: str, age: c.age, proof: c.proof}
			if got := judgeLive(o, c.now, c.slot, c.slot.Flags&0x1f); got != c.want {
				t.Errorf("verdict %d, want %d", got, c.want)
			}
			if c.want == liveProven && (o.proof.count != c.now.count || o.proof.epoch != c.now.epoch || o.age != c.slot.Age) {
				t.Errorf("proof %+v age %d, want %+v and %d", o.proof, o.age, c.now, c.slot.Age)
			}
		})
	}
}

// TestJudgeLiveChain: proofs read in GCs' sweeps, one GC apart, follow
// an object from its allocation through its promotion and a major GC: a
// sweep does not free what its GC marked (its age rose, or it is old in a
// minor GC).
func TestJudgeLiveChain(t *testing.T) {
	sweep := func(count, epoch uint64) gcPoint { return gcPoint{count: count, epoch: epoch} }
	o := &liveObject{typ: 5, klass: 0x1000, proof: gcPoint{count: 10, epoch: 8, safe: true}}
	for i, c := range []struct {
		now  gcPoint
		age  int
		want liveVerdict
		safe bool
	}{
		{sweep(11, 8), 1, liveProven, true},   // marked by GC 11
		{sweep(12, 8), 2, liveProven, true},   // and by 12
		{sweep(13, 8), 3, liveProven, true},   // old in a minor GC
		{sweep(14, 14), 3, liveProven, false}, // the major's sweep: was it marked?
		{sweep(15, 14), 3, liveUnproven, false},
	} {
		slot := rubystack.SlotObject{Flags: 5, Klass: 0x1000, Age: c.age, AgeKnown: true}
		if v := judgeLive(o, c.now, slot, 5); v != c.want || v == liveProven && o.proof.safe != c.safe {
			t.Errorf("read %d at %+v, age %d: verdict %d, proof %+v; want %d, safe %v", i, c.now, c.age, v, o.proof, c.want, c.safe)
		}
	}
	// In a major GC's sweep, an old object's mark bit says it survives it.
	o = &liveObject{typ: 5, klass: 0x1000, age: 3, proof: gcPoint{count: 13, epoch: 8, safe: true}}
	marked := rubystack.SlotObject{Flags: 5, Klass: 0x1000, Age: 3, AgeKnown: true, Marked: true, MarkKnown: true}
	if v := judgeLive(o, sweep(14, 14), marked, 5); v != liveProven || !o.proof.safe {
		t.Errorf("marked in a major's sweep: %d, proof %+v", v, o.proof)
	}
	if v := judgeLive(o, sweep(15, 14), marked, 5); v != liveProven {
		t.Errorf("the GC after: %d", v)
	}
	// A young object read in a sweep with its age unchanged may be freed by
	// it: the next GC proves nothing.
	o = &liveObject{typ: 5, klass: 0x1000, age: 1, proof: gcPoint{count: 10, epoch: 8}}
	if v := judgeLive(o, sweep(11, 8), rubystack.SlotObject{Flags: 5, Klass: 0x1000, Age: 2, AgeKnown: true}, 5); v != liveUnproven {
		t.Errorf("after an unsafe sweep: %d", v)
	}
}

// TestJudgeLiveFirstRead: the first read of a sample's slot takes the
// object there as the sample's only when its age proves it, and keeps its
// type and class for the reads after.
func TestJudgeLiveFirstRead(t *testing.T) {
	alloc := gcPoint{count: 10, epoch: 8, safe: true}
	now := gcPoint{count: 12, epoch: 8, idle: true}
	o := &liveObject{proof: alloc}
	next := gcPoint{count: 11, epoch: 8, idle: true}
	if v := judgeLive(o, next, rubystack.SlotObject{Flags: 7, Klass: 0x30, Age: 1, AgeKnown: true}, 7); v != liveProven || o.typ != 7 || o.klass != 0x30 {
		t.Errorf("age 1 after a GC: %d, %+v", v, o)
	}
	o = &liveObject{proof: alloc}
	if v := judgeLive(o, now, rubystack.SlotObject{Flags: 7, Klass: 0x30, Age: 2, AgeKnown: true}, 7); v != liveUnproven || o.typ != 0 {
		t.Errorf("age 2 after two GCs: %d, %+v", v, o)
	}
	o = &liveObject{proof: alloc}
	if v := judgeLive(o, now, rubystack.SlotObject{Flags: 7, Klass: 0x30, Age: 1, AgeKnown: true}, 7); v != liveDead || o.typ != 0 {
		t.Errorf("age 1 after two GCs: %d, %+v", v, o)
	}
	o = &liveObject{proof: alloc}
	if v := judgeLive(o, gcPoint{count: 14, epoch: 8, idle: true}, rubystack.SlotObject{Flags: 7, Klass: 0x30, Age: 3, AgeKnown: true}, 7); v != liveUnproven {
		t.Errorf("old after four GCs: %d", v)
	}
}

// TestJudgeLiveOldPastOneMajor: an old object read under the one major GC
// started since its proof (a minor GC, then at once a major one, between
// two polls) is proven; past two major GCs, or a GC after the major one,
// it is not, and where the major GC counts are unknown neither.
func TestJudgeLiveOldPastOneMajor(t *testing.T) {
	old := rubystack.SlotObject{Flags: 5, Klass: 0x1000, Age: rubystack.MaxAge, AgeKnown: true}
	proof := gcPoint{count: 138, epoch: 121, idle: true, majors: 7, majorsKnown: true}
	for _, c := range []struct {
		name string
		now  gcPoint
		want liveVerdict
	}{
		{"minor then major", gcPoint{count: 140, epoch: 140, majors: 8, majorsKnown: true}, liveProven},
		{"the major's sweep over", gcPoint{count: 140, epoch: 140, idle: true, majors: 8, majorsKnown: true}, liveProven},
		{"two majors", gcPoint{count: 140, epoch: 140, majors: 9, majorsKnown: true}, liveUnproven},
		{"a minor after the major", gcPoint{count: 141, epoch: 140, majors: 8, majorsKnown: true}, liveUnproven},
		{"majors unknown", gcPoint{count: 140, epoch: 140}, liveUnproven},
	} {
		o := &liveObject{typ: 5, klass: 0x1000, age: rubystack.MaxAge, proof: proof}
		if v := judgeLive(o, c.now, old, 5); v != c.want {
			t.Errorf("%s: %d, want %d", c.name, v, c.want)
		}
	}
	// Young in the slot now: another object, whatever the GCs.
	o := &liveObject{typ: 5, klass: 0x1000, age: rubystack.MaxAge, proof: proof}
	young := old
	young.Age = 0
	if v := judgeLive(o, gcPoint{count: 140, epoch: 140, majors: 8, majorsKnown: true}, young, 5); v != liveDead {
		t.Errorf("young in an old object's slot: %d", v)
	}
}

// TestJudgeUnaged: an object without write barriers (its age stays 0)
// is proven alive by its mark bit, read after the first GC that could
// free it; never by its age, and never dead by an unmarked bit (its page
// may have been swept since its GC marked it).
func TestJudgeUnaged(t *testing.T) {
	slot := func(marked bool) rubystack.SlotObject {
		return rubystack.SlotObject{Flags: 0xc, Klass: 0x1000, AgeKnown: true, MarkKnown: true, Marked: marked,
			WBKnown: true, WBUnprotected: true}
	}
	proof := gcPoint{count: 10, epoch: 9, idle: true}
	sweeping := gcPoint{count: 10, epoch: 9} // read under GC 10's sweep, not proven safe
	for _, c := range []struct {
		name   string
		proof  gcPoint
		now    gcPoint
		marked bool
		want   liveVerdict
	}{
		{"marked by the next GC", proof, gcPoint{count: 11, epoch: 9}, true, liveProven},
		{"marked, its sweep over", proof, gcPoint{count: 11, epoch: 9, idle: true}, true, liveProven},
		{"unmarked after the next GC", proof, gcPoint{count: 11, epoch: 9, idle: true}, false, liveUnproven},
		{"marked, two GCs since", proof, gcPoint{count: 12, epoch: 9}, true, liveUnproven},
		{"marked under the sweep of its proof", sweeping, gcPoint{count: 10, epoch: 9, idle: true}, true, liveProven},
		{"marked by the GC after an unsafe proof", sweeping, gcPoint{count: 11, epoch: 9}, true, liveUnproven},
	} {
		o := &liveObject{typ: 0xc, klass: 0x1000, proof: c.proof}
		v := judgeLive(o, c.now, slot(c.marked), 0xc)
		if v != c.want {
			t.Errorf("%s: %d, want %d", c.name, v, c.want)
		}
		if v == liveProven && (!o.survived || o.age != 0 || o.proof.count != c.now.count) {
			t.Errorf("%s: proven, but left %+v", c.name, *o)
		}
	}
	// Proven by its mark once, then read where the page's bits could not
	// be: its age 0 tells nothing.
	o := &liveObject{typ: 0xc, klass: 0x1000, proof: proof, survived: true}
	unread := slot(true)
	unread.WBKnown, unread.WBUnprotected, unread.MarkKnown = false, false, false
	if v := judgeLive(o, gcPoint{count: 11, epoch: 9}, unread, 0xc); v != liveUnproven {
		t.Errorf("once without write barriers, its bits unread: %d, want not proven", v)
	}
	// The same slot read as if it had write barriers: age 0 after a GC is
	// a successor's, and the object is dead.
	o = &liveObject{typ: 0xc, klass: 0x1000, proof: proof}
	aged := slot(true)
	aged.WBUnprotected = false
	if v := judgeLive(o, gcPoint{count: 11, epoch: 9}, aged, 0xc); v != liveDead {
		t.Errorf("age 0 after a GC, with write barriers: %d, want dead", v)
	}
}

// TestOldAtEnd: an old object proven before the recording ended, with no
// major GC started between, was not freed then; one proven before a major
// GC that started before the end, or young, or proven in a major GC's
// sweep that may still free it, may have been.
func TestOldAtEnd(t *testing.T) {
	end := rubystack.GCStamp{Count: 138, Epoch: 120, Idle: true}
	for _, c := range []struct {
		name string
		o    liveObject
		want bool
	}{
		{"old, proven at the end's GC", liveObject{age: rubystack.MaxAge, proof: gcPoint{count: 138, epoch: 120, idle: true}}, true},
		{"old, proven earlier in the epoch", liveObject{age: rubystack.MaxAge, proof: gcPoint{count: 125, epoch: 120}}, true},
		{"old, before the epoch's major", liveObject{age: rubystack.MaxAge, proof: gcPoint{count: 119, epoch: 101, idle: true}}, false},
		{"old, in the major's own sweep", liveObject{age: rubystack.MaxAge, proof: gcPoint{count: 120, epoch: 120}}, false},
		{"young", liveObject{age: 2, proof: gcPoint{count: 138, epoch: 120, idle: true}}, false},
	} {
		if got := oldAtEnd(&c.o, end); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
