package symtab

import (
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

// maxNewAge is the oldest an object can be, at a read under stamp now, if
// it was allocated at its address after a sample stamped sample, whose
// frame ran another object there: the one the sample saw must have been
// freed first, by the sweep of a GC that started after the sample (or of
// the major GC marking at it: an incremental marking reaches only what is
// still reachable at its end, and the frame may have returned by then; a
// minor GC marks at once, while no Ruby code runs, so a frame sampled then
// was on its stack when the marking began, as markedBySample says). Only the
// GCs that started after that one can have marked the new object, each
// making it one older (a GC marking now may have reached it already).
// ok is false when the stamps do not allow that account: the GC compacted
// (an object moved in keeps its age), or a major GC other than one still
// marking and the only major GC since the sample's epoch may have.
func maxNewAge(sample payload.GCStamp, now rubystack.GCStamp, m Majors) (age int, ok bool) {
	if !sample.Stamped || sample.Compacting || now.Compacting || now.Count < sample.Count {
		return 0, false
	}
	// Compaction comes only after a major GC's marking: in the sample's
	// epoch nothing has moved since (a compacting sample was refused), nor
	// while the one major GC since the sample is still marking.
	onlyMajorMarking := now.Count == sample.Count+1 && now.Epoch == now.Count && now.Marking ||
		nextMajorMarking(SampleCheck(sample, m), readCheck(now, m))
	if now.Epoch != sample.Epoch && !onlyMajorMarking {
		return 0, false
	}
	freedAt := sample.Count + 1
	if sample.Marking && sample.Count == sample.Epoch {
		freedAt = sample.Count
	}
	if now.Count < freedAt || now.Count == freedAt && now.Marking {
		// No GC has swept since the sample (a GC sweeps only once its
		// marking is over, and the one before finished sweeping before
		// it started): nothing was freed.
		return -1, true
	}
	d := now.Count - freedAt
	if d >= rubystack.MaxAge {
		return rubystack.MaxAge, true
	}
	return int(d), true
}

// survived says whether objects whose ages were read under stamp now (read
// after their names, so a proven object held its address from the sample
// to that read) are those a sample stamped sample ran: each is older than
// any object allocated there since could be, so it was there before, and
// nothing moved it. The sampled objects are usually that old: each GC
// since marked them while they were in use, and aged them (except objects
// without write barriers, which never age: their frames go unproven).
func survived(sample payload.GCStamp, now rubystack.GCStamp, ages []int, m Majors) bool {
	limit, ok := maxNewAge(sample, now, m)
	if !ok || limit >= rubystack.MaxAge {
		return false
	}
	for _, a := range ages {
		if a <= limit {
			return false
		}
	}
	return true
}
