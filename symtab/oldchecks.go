package symtab

import (
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

// maxOldChecks bounds the keys whose old objects the table follows; past
// it, it starts afresh (a name is then read again, as at first).
const maxOldChecks = 1 << 16

// Check is a moment at which the objects at a frame key's addresses were
// found in the old generation: by the program, for a sample (payload.Frame's
// IseqOld and MEOld), or by a read that named them.
type Check struct {
	st payload.GCStamp
	// safe: nothing old there is freed before the next major GC: a sample
	// ran the code (so a GC that had marked kept it), and not while the
	// epoch's major GC was still marking; a read, once that GC had swept.
	safe bool
	// majors counts the major GCs started by the one that started st's
	// epoch, where known (the reader saw that epoch).
	majors uint64
	knows  bool
}

// Majors is what the reader of a process knows of its major GCs
// (rubystack.Reader.MajorsAt): how many had started once the one that
// started an epoch did.
type Majors interface {
	MajorsAt(epoch uint64) (uint64, bool)
}

// SampleCheck is the check the program made for a sample stamped st.
func SampleCheck(st payload.GCStamp, m Majors) Check {
	c := Check{st: st, safe: !(st.Count == st.Epoch && st.Marking)}
	c.majors, c.knows = m.MajorsAt(st.Epoch)
	return c
}

// readCheck is the check of a read made under stamp now.
func readCheck(now rubystack.GCStamp, m Majors) Check {
	c := Check{st: stampOf(now), safe: now.Count != now.Epoch || now.Idle}
	c.majors, c.knows = m.MajorsAt(now.Epoch)
	return c
}

// nextMajorMarking says whether b was made while the first major GC after
// a's epoch began was marking: that GC has swept nothing yet, nor
// compacted (compaction follows marking), and no other major GC did
// since a's epoch began.
func nextMajorMarking(a, b Check) bool {
	return b.st.Epoch == b.st.Count && b.st.Marking && a.knows && b.knows && b.majors == a.majors+1
}

// linked says whether a check a, then a later one b, both finding old
// objects at the same address, found the same objects. Nothing moved them
// in between: a GC that compacts is stamped compacting from its start
// until its compaction ends (so a non-compacting check in an epoch comes
// after its only compaction), compaction comes after a major GC's marking,
// and a minor GC never compacts. And nothing freed them:
//   - no major GC finished marking in between, and few GCs started: for
//     b's object to be another, a's must have been freed by a GC's sweep
//     (one that started after a, or the one marking at a) and b's
//     allocated after, then promoted, which takes three GCs' marking more;
//   - or both are of one epoch, or b of the next while its major GC still
//     marks (nextMajorMarking), and a is safe: old objects are freed only
//     by a major GC's sweep, and a's were not garbage its epoch's sweep
//     had yet to free.
func linked(a, b Check) bool {
	if !a.st.Stamped || !b.st.Stamped || a.st.Compacting || b.st.Compacting || b.st.Count < a.st.Count {
		return false
	}
	sameEpoch := a.st.Epoch == b.st.Epoch
	// A major GC started since a, still marking at b, and the last to start.
	marking := b.st.Epoch > a.st.Count && b.st.Epoch == b.st.Count && b.st.Marking
	if d := b.st.Count - a.st.Count; sameEpoch || marking {
		freedAt := a.st.Count + 1 // the first GC whose sweep could free a's objects
		if a.st.Marking {
			freedAt = a.st.Count
		}
		if b.st.Count < freedAt+3 || d == 0 {
			return true
		}
	}
	return a.safe && (sameEpoch || nextMajorMarking(a, b))
}

// ReadBetween is the check that a read made from stamp before to stamp
// after stands for, where one holds: a minor GC may have run meanwhile (at
// hundreds a second, it often does), which frees and moves nothing old, so
// what was read of old objects stands, as read no later than after.
func ReadBetween(before, after rubystack.GCStamp, m Majors) (Check, bool) {
	if after.Epoch != before.Epoch || after.Compacting {
		return Check{}, false
	}
	c := readCheck(after, m)
	c.safe = readCheck(before, m).safe
	return c, true
}

// ProvenFor says whether the old objects a read found were those a sample
// stamped st ran; old: the program found them old then too.
func ProvenFor(st payload.GCStamp, old bool, read Check, m Majors) bool {
	unsure := SampleCheck(st, m)
	unsure.safe = false // without the program's word, a's objects may have been garbage
	return linked(unsure, read) || old && linked(SampleCheck(st, m), read)
}

// stampOf is a stamp read by user space as the program stamps samples.
func stampOf(s rubystack.GCStamp) payload.GCStamp {
	return payload.GCStamp{Stamped: true, Count: s.Count, Epoch: s.Epoch, Marking: s.Marking, Compacting: s.Compacting}
}

// before orders checks by the GC's progress.
func before(a, b Check) bool {
	return a.st.Count < b.st.Count || a.st.Count == b.st.Count && a.st.Marking && !b.st.Marking
}

// OldRun is a run of checks that found the same old objects at a frame
// key's addresses, each linked to the run: the objects a read named info.
// Each sample of the run has that name, though it was read GCs later.
type OldRun struct {
	info   FrameInfo
	lo, hi Check // the earliest and latest checks
}

// RunFrom is the run of one check, c, of objects whose name the table does
// not keep (the environment chains the recorder walks keep runs too).
func RunFrom(c Check) OldRun { return OldRun{lo: c, hi: c} }

// Started says whether the run holds a check (the zero OldRun holds none).
func (r OldRun) Started() bool { return r.lo.st.Stamped }

// Extend adds c to the run if it found the run's objects.
func (r *OldRun) Extend(c Check) bool {
	switch {
	case before(r.hi, c):
		if !linked(r.hi, c) {
			return false
		}
		r.hi = c
	case before(c, r.lo):
		if !linked(c, r.lo) {
			return false
		}
		r.lo = c
	default:
		return linked(r.lo, c) || linked(c, r.hi)
	}
	return true
}

// checkedOld names frame f of a sample stamped st through the run of old
// checks of its key, when the program found its objects old then and the
// run takes it; it returns the span the name holds for, the zero Span if
// none. A run that does not take it is kept: samples come out of order,
// and a read will start another when needed.
func (t *Table) checkedOld(k FrameKey, f payload.Frame, st payload.GCStamp, m Majors) (FrameInfo, payload.Span) {
	if !f.IseqOld && !f.CFrame || !f.MEOld || !st.Stamped {
		return FrameInfo{}, payload.Span{}
	}
	r, ok := t.oldChecks[k]
	if !ok || !r.Extend(SampleCheck(st, m)) {
		return FrameInfo{}, payload.Span{}
	}
	t.oldChecks[k] = r
	iv := st.Interval()
	span := payload.Span{Epoch: st.Epoch, From: iv, To: iv}
	if st.Count != st.Epoch {
		// A GC after the epoch's major one: that one has swept, and old
		// objects stay until the next major GC.
		span.To = ^uint64(0)
	}
	return r.info, span
}

// checkedRead starts or continues the run of key k with a read, check c,
// that found its objects old and named them info.
func (t *Table) checkedRead(k FrameKey, info FrameInfo, c Check) {
	if r, ok := t.oldChecks[k]; ok && r.info == info && r.Extend(c) {
		t.oldChecks[k] = r
		return
	}
	if t.oldChecks == nil || len(t.oldChecks) >= maxOldChecks {
		t.oldChecks = map[FrameKey]OldRun{}
	}
	t.oldChecks[k] = OldRun{info: info, lo: c, hi: c}
}
