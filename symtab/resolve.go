package symtab

import (
	"errors"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

// Resolve names the payload's frames that the table has no name for that
// holds for the payload's sample, through r, which reads the process's live
// memory, and fills ids with the ids of the names each frame has for the
// sample (as NameIDs does). It also returns the frames it named, with the
// spans their names hold for, and how many of those are unknown.
//
// A name read now holds for the payload's sample only if nothing at the
// frame's addresses can have been freed in between: the GC stamp must be
// the same when reading starts and ends, and either the sample was taken
// in the same GC interval (the code ran then, so the GC cannot free it
// before the interval ends), or the code is in the old generation, which
// only a major GC frees (then the name holds until the epoch ends, for
// samples after now).
func (t *Table) Resolve(r *rubystack.Reader, p *payload.Payload, ids []uint64) (_ []uint64, added []payload.NamedFrame, unknown int) {
	ids = t.NameIDs(p, ids)
	var fresh []payload.Frame
	var seen map[FrameKey]bool
	for i, f := range p.Frames {
		if ids[i] >= NameFirst || ids[i] == NameUnknown && f.Error {
			continue
		}
		k := Key(p.PID, p.Gen, f)
		if info, span := t.checkedOld(k, f, p.GC, r); span != (payload.Span{}) {
			// The same objects as named, though the GC ran since: no read.
			t.add(k, Named{FrameInfo: info, Span: span})
			added = append(added, payload.NamedFrame{Frame: f, Span: span})
			continue
		}
		if !seen[k] {
			if seen == nil {
				seen = map[FrameKey]bool{}
			}
			seen[k] = true
			fresh = append(fresh, f)
		}
	}
	if len(fresh) == 0 {
		if len(added) > 0 {
			ids = t.NameIDs(p, ids)
		}
		return ids, added, 0
	}
	if t.keysFull() {
		// No room for another key: the frames are not read, and named
		// for the budget (their samples count them).
		over := t.overBudgetID()
		for i, f := range p.Frames {
			if ids[i] < NameFirst && !f.Error && seen[Key(p.PID, p.Gen, f)] {
				ids[i] = over
			}
		}
		return ids, added, 0
	}
	var names []Named
	for try := 0; ; try++ {
		got, settled := nameFrames(r, p, fresh)
		if names == nil {
			names = got
		} else {
			// A try the GC moved under keeps what it proved.
			for i := range got {
				if got[i].Span != (payload.Span{}) || got[i].Back != (payload.Span{}) || got[i].Old {
					names[i] = got[i]
				}
			}
		}
		if settled || try == maxNamingTries-1 {
			break
		}
	}
	var unproven map[FrameKey]bool
	for i, f := range fresh {
		n := names[i]
		if n.Span == (payload.Span{}) && n.Back == (payload.Span{}) {
			// Holds for no sample. Read whole, it is a name that could
			// not be proven for the sample (the code there may have been
			// freed and replaced since), not a frame that could not be read.
			if n.Label != "" && !n.Unknown && !n.Drop {
				if unproven == nil {
					unproven = map[FrameKey]bool{}
				}
				unproven[Key(p.PID, p.Gen, f)] = true
			}
			continue
		}
		if n.Unknown {
			unknown++
		}
		k := Key(p.PID, p.Gen, f)
		n.FrameInfo = t.canonical(n.FrameInfo)
		if n.Old {
			t.checkedRead(k, n.FrameInfo, n.OldAt)
		}
		if n.Back != (payload.Span{}) {
			t.add(k, Named{FrameInfo: n.FrameInfo, Span: n.Back})
		}
		if n.Span != (payload.Span{}) {
			t.add(k, Named{FrameInfo: n.FrameInfo, Span: n.Span})
			added = append(added, payload.NamedFrame{Frame: f, Span: n.Span})
		} else {
			added = append(added, payload.NamedFrame{Frame: f, Span: n.Back})
		}
	}
	if len(added) > 0 {
		ids = t.NameIDs(p, ids)
	}
	for i, f := range p.Frames {
		if ids[i] == NameUnknown && !f.Error && unproven[Key(p.PID, p.Gen, f)] {
			ids[i] = NameReplaced
		}
	}
	return ids, added, unknown
}

// maxNamingTries bounds the reads of frames whose GC stamp kept changing.
const maxNamingTries = 3

// nameFrames reads the names of frames and the span each holds for (the
// zero Span: for no sample). settled is false when the GC moved on while
// reading, so that no name could be trusted.
func nameFrames(r *rubystack.Reader, p *payload.Payload, frames []payload.Frame) (names []Named, settled bool) {
	names = make([]Named, len(frames))
	before, err := r.GCStamp()
	stamped := err == nil
	if errors.Is(err, rubystack.ErrNoGCStamps) {
		// Nothing tells when code is freed: names hold for good, as
		// before stamps (the recording says so).
		for i, f := range frames {
			names[i] = Named{FrameInfo: frameInfo(r, f), Span: payload.FullSpan}
		}
		return names, true
	}
	if !stamped || before.Compacting {
		return names, false
	}
	// The caches were filled under another stamp, maybe with code since freed.
	r.DropCaches()
	defer r.Batch()()
	old := make([]bool, len(frames))
	objs := make([][]uint64, len(frames)) // each frame's nameObjects; nil: not found
	for i, f := range frames {
		// Generation first: an old object stays until the next major GC, so
		// what is read after this is of the same object.
		objs[i] = nameObjects(r, f)
		old[i] = objs[i] != nil && allOld(r, objs[i])
		names[i].FrameInfo = frameInfo(r, f)
	}
	after, err := r.GCStamp()
	read, ok := ReadBetween(before, after, r)
	if err != nil || !ok {
		return make([]Named, len(frames)), false
	}
	// What was read of young objects while a GC ran is read again.
	moved := after != before
	for i := range frames {
		if !moved {
			names[i].Span = SpanFor(p.GC, before, old[i])
		}
		if !old[i] || names[i].Unknown || names[i].Drop {
			continue
		}
		names[i].Old, names[i].OldAt = true, read
		proven := ProvenFor(p.GC, (frames[i].IseqOld || frames[i].CFrame) && frames[i].MEOld, read, r)
		if !names[i].Span.Covers(p.GC) && proven {
			names[i].Back = sampleSpan(p.GC)
		}
	}
	provenByAge(r, p.GC, after, objs, names)
	return names, !moved
}

// sampleSpan is the span of the one GC interval a sample stamped st was
// taken in.
func sampleSpan(st payload.GCStamp) payload.Span {
	return payload.Span{Epoch: st.Epoch, From: st.Interval(), To: st.Interval()}
}

// provenByAge proves, for the sample stamped sample, the names of frames
// nothing else proved, by the ages of the objects their names come from
// (objs, as nameFrames found them; survived), read now, after their names;
// read is the stamp read after the names. Nothing is read when read already
// leaves no proof (a later stamp leaves none either), and each object's age
// once: the frames of a deep stack share a few iseqs and method entries.
// Nor where the layout does not tell a young object's age: old ones alone
// are what linked already covers.
func provenByAge(r *rubystack.Reader, sample payload.GCStamp, read rubystack.GCStamp, objs [][]uint64, names []Named) {
	if limit, ok := maxNewAge(sample, read, r); !ok || limit >= rubystack.MaxAge || !r.AgesKnown() {
		return
	}
	var ages map[uint64]int // by address; -1: unreadable
	// youngest is a frame's youngest object's age; -1: unreadable or not tried.
	youngest := make([]int, len(names))
	for i := range names {
		youngest[i] = -1
		n := &names[i]
		if objs[i] == nil || n.Span.Covers(sample) || n.Back != (payload.Span{}) || n.Unknown || n.Drop || n.Label == "" {
			continue
		}
		if ages == nil {
			ages = map[uint64]int{}
		}
		youngest[i] = rubystack.MaxAge
		for _, v := range objs[i] {
			a, ok := ages[v]
			if !ok {
				var err error
				if a, err = r.Age(v); err != nil {
					a = -1
				}
				ages[v] = a
			}
			youngest[i] = min(youngest[i], a)
		}
	}
	if ages == nil {
		return
	}
	now, err := r.GCStamp()
	if err != nil {
		return
	}
	for i := range names {
		if youngest[i] >= 0 && survived(sample, now, youngest[i:i+1], r) {
			names[i].Back = sampleSpan(sample)
		}
	}
}

// SpanFor is the span a name read under GC stamp now holds for, the code
// having been seen by a sample stamped sample, and being in the old
// generation or not: the zero Span when it holds for no sample.
func SpanFor(sample payload.GCStamp, now rubystack.GCStamp, old bool) payload.Span {
	if now.Compacting {
		return payload.Span{}
	}
	interval := payload.GCStamp{Stamped: true, Count: now.Count, Marking: now.Marking}.Interval()
	// The sample ran the code in this same interval: it stays until the
	// interval ends (a GC frees only what its marking did not reach, and
	// moves objects only while compacting).
	sameInterval := sameInterval(sample, now)
	from := interval
	if markedBySample(sample, now) {
		// Or in the marking just before it, which kept the code: it
		// stays through this interval too.
		sameInterval, from = true, sample.Interval()
	}
	// Old code stays until the next major GC starts, once this epoch's
	// major GC has swept (until then old garbage may still be freed).
	settled := now.Count != now.Epoch || now.Idle
	switch {
	case old && settled && sameInterval:
		return payload.Span{Epoch: now.Epoch, From: from, To: ^uint64(0)}
	case old && settled:
		// Samples of this interval before now may have seen other code.
		return payload.Span{Epoch: now.Epoch, From: 2*now.Count + 2, To: ^uint64(0)}
	case sameInterval:
		return payload.Span{Epoch: now.Epoch, From: from, To: interval}
	}
	return payload.Span{}
}

// markedBySample says whether a sample stamped sample was taken while a
// minor GC marked, and that GC has not been followed by another yet (now:
// its sweep, or after). Then the GC marked everything the sample's frames
// ran, and none of it is freed before the next GC's sweep: a name read now
// holds for the sample, though it was read after the marking ended.
//
// Why: a minor GC never marks incrementally (only a major one does), so
// from its start to the end of its marking no Ruby code runs in the
// process: the GC holds the VM's lock (and stops other Ractors), and a
// thread without it pushes no frame. A sample stamped as marking (count
// not the epoch's: a minor GC) therefore holds frames that were on their
// thread's stack when the marking began, and every living thread's stack
// is a root: the iseq of each frame, and the environment holding its
// method entry, were marked. A GC frees only what its marking missed, and
// a minor one moves nothing; the next GC to free anything is the next one,
// which starts a new interval. The stamp is read before the stack is
// walked, while the sampled thread is stopped in the program.
func markedBySample(sample payload.GCStamp, now rubystack.GCStamp) bool {
	return sample.Stamped && sample.Marking && !sample.Compacting && sample.Count != sample.Epoch &&
		now.Count == sample.Count && now.Epoch == sample.Epoch && !now.Marking && !now.Compacting
}

// nameObjects returns the objects a frame's name comes from: the method
// entry slot of its environment, the method entry that leads to, and its
// iseq (a C frame's is not in its name); nil where the slot cannot be read.
func nameObjects(r *rubystack.Reader, f payload.Frame) []uint64 {
	cme, err := r.LocalMethodEntry(f.CME)
	if err != nil {
		return nil
	}
	if f.CFrame {
		return []uint64{f.CME, cme}
	}
	return []uint64{f.CME, cme, f.Iseq}
}

// allOld says whether every object of objs is in the old generation.
func allOld(r *rubystack.Reader, objs []uint64) bool {
	for _, v := range objs {
		if old, err := r.Old(v); err != nil || !old {
			return false
		}
	}
	return true
}

// frameInfo reads one frame's name.
func frameInfo(r *rubystack.Reader, f payload.Frame) FrameInfo {
	one := payload.Payload{Frames: []payload.Frame{f}}
	raw := one.RawFrames(r)
	if len(raw) == 0 {
		return FrameInfo{Drop: true}
	}
	fr := r.Symbolize(raw[0])
	return cutName(FrameInfo{Label: fr.Label, Path: fr.Path, HasPath: fr.HasPath, Line: fr.Line, CFunc: fr.CFunc, Unknown: fr.Unknown})
}

// sameInterval says whether a sample stamped st was taken in the GC
// interval the process is in now: nothing the sample's frames ran in has
// been freed or moved since.
func sameInterval(st payload.GCStamp, now rubystack.GCStamp) bool {
	interval := payload.GCStamp{Stamped: true, Count: now.Count, Marking: now.Marking}.Interval()
	return st.Stamped && !st.Compacting && st.Epoch == now.Epoch && st.Interval() == interval
}
