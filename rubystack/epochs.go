package rubystack

// A GC stamp says when the last major GC started (its Epoch), not how many
// major GCs started between two stamps: a sample's epoch and a later read's
// may be one major GC apart, or several. The Reader keeps, for the epochs
// it saw, how many major GCs had started by then (profile.major_gc_count):
// two epochs whose counts differ by one have no major GC between them, so no
// sweep of the old generation either, while the later one is still marking.

// maxEpochs bounds the epochs a Reader remembers (a few seconds of a Ruby
// running a hundred major GCs a second): the oldest go first.
const maxEpochs = 1024

// epochs maps the epochs a Reader saw to their major GC counts.
type epochs struct {
	majors map[uint64]uint64 // by epoch
	order  []uint64          // epochs, oldest first, for eviction
}

func (e *epochs) add(epoch, majors uint64) {
	if e.majors == nil {
		e.majors = map[uint64]uint64{}
	}
	if _, ok := e.majors[epoch]; ok {
		return
	}
	if len(e.order) >= maxEpochs {
		delete(e.majors, e.order[0])
		e.order = e.order[1:]
	}
	e.majors[epoch] = majors
	e.order = append(e.order, epoch)
}

// MajorsAt returns how many major GCs had started once the one that
// started epoch (a GCStamp's Epoch) did, if the Reader saw that epoch in a
// read it could trust (see noteEpoch).
func (r *Reader) MajorsAt(epoch uint64) (uint64, bool) {
	m, ok := r.epochs.majors[epoch]
	return m, ok
}

// noteEpoch remembers the epoch of s with its major GC count, from a read
// of the GC's fields (buf, from offset lo of the objspace) that is not
// torn: a GC's start bumps the count, then sets the mode to marking, then,
// for a major one, bumps major_gc_count and sets the last major GC to the
// count (minor_gc_count instead, for a minor one), while reads race it.
// Counts that add up, and a major GC's marking only with its own epoch,
// leave one tear: the mode read before a start and the counts after it;
// a second read, which would see the mode changed, rules that out.
func (r *Reader) noteEpoch(s GCStamp, buf []byte, lo int64, again func() ([]byte, error)) {
	g := &r.Layout.GC
	if _, ok := r.epochs.majors[s.Epoch]; ok || s.Epoch == 0 || g.MajorCount < 0 || g.MinorCount < 0 {
		return
	}
	minor, major := le64(buf[g.MinorCount-lo:]), le64(buf[g.MajorCount-lo:])
	if minor+major != s.Count || s.Marking && s.Epoch != s.Count || major == 0 {
		return
	}
	b, err := again()
	if err != nil || string(b) != string(buf) {
		return
	}
	r.epochs.add(s.Epoch, major)
}
