package recording

import (
	"errors"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

// FeatureRubySymbols is the private perf.data feature bit holding the Ruby
// symbol table. perf 6.1 skips feature bits it does not know.
const FeatureRubySymbols = 200

// FeatureKallsyms holds /proc/kallsyms as it was while recording, gzipped,
// so kernel frames can be named on another machine.
const FeatureKallsyms = 201

// FeatureStartTime holds when sampling started, wall-clock time: a u64 of
// Unix nanoseconds (samples carry perf's clock, which counts from boot).
const FeatureStartTime = 202

// symbolTableVersion is the format of the Ruby symbol table section.
// Version 3 lists names, which samples refer to by id (payload.Named);
// version 1 (a name per frame key, for every sample) is read too. (Version 2
// was never released.)
const symbolTableVersion = 3

// maxNamesPerKey bounds the names one frame key keeps while recording (code
// churning at one address, a name per GC epoch); the oldest go first. A
// sample is named when it is read, so a late one only misses a name it
// could have had.
const maxNamesPerKey = 64

// Name ids a named sample's frames carry (payload.Named): the frame has
// no name, or none that holds for its sample; names count from NameFirst.
const (
	NameUnknown  = 0
	NameReplaced = 1
	NameFirst    = 2
)

// maxNames bounds the distinct names a table holds (some 100 MB): past it
// new names read as unknown. Code that makes a new name each time (eval'd
// methods named by a counter) is what gets there.
const maxNames = 1 << 20

// ReplacedLabel names a Ruby frame whose code could not be named for its
// sample: the name read at its address holds only for other GC intervals,
// so the code there may have been freed and replaced in between.
const ReplacedLabel = "[code freed before it was named]"

// maxSymbolTableBytes bounds the decompressed symbol table read from a file.
const maxSymbolTableBytes = 256 << 20

// Image is a process image: a pid from one exec to the next. Gen counts
// the times the recording attached to the pid (payload.Payload.Gen).
type Image struct{ PID, Gen uint32 }

// FrameKey identifies a captured control frame in one process image: the
// pointers the BPF walker copied.
type FrameKey struct {
	PID    uint32
	Gen    uint32
	Iseq   uint64
	PC     uint64
	CME    uint64
	CFrame bool
}

// FrameInfo is what a frame key means: a symbolized frame, or that the frame
// is not one rb_profile_frames reports (Drop).
type FrameInfo struct {
	Label   string
	Path    string
	HasPath bool
	Line    int64
	CFunc   bool
	Unknown bool
	Drop    bool
}

// Named is one name a frame key had, and the samples it holds for: those
// whose GC stamp the span covers (payload.FullSpan for a process without GC
// stamps).
type Named struct {
	FrameInfo
	Span payload.Span
	// Back, while naming: a span for the sample's own interval, proven
	// another way than Span (sameObjects), when Span does not cover it.
	Back payload.Span
	// Old, while naming: the name was read of objects all in the old
	// generation, by the check OldAt.
	Old   bool
	OldAt check
	ID    uint64 // the id samples refer to it by (NameID)
}

// SymbolTable maps frame keys to their meaning, per process, and says
// where each process's VM entry function is. A key has several names when
// the code at its addresses was freed and replaced while recording; each
// holds for the samples of its span.
type SymbolTable struct {
	Frames map[FrameKey][]Named
	VMExec map[Image]VMExec
	// Names are the distinct names samples refer to, by id NameFirst+i.
	Names   []FrameInfo
	nameIDs map[FrameInfo]uint64
	// decodedFrames: Frames came from a file (a recording before version 3,
	// whose samples name frames by key), so Encode keeps them.
	decodedFrames bool
	// oldChecks follows, while recording, the keys whose objects were old
	// when named, so that later samples find them still the same.
	oldChecks map[FrameKey]oldCheck
	// The memory budget while recording (budget.go; 0: none): bytes of
	// names and of frame keys held, and their bounds; coarse holds the ids
	// of the names given without their line past the names' budget.
	nameBytes, maxNameBytes int64
	keyBytes, maxKeyBytes   int64
	coarse                  map[uint64]bool
	// overBudgetGiven: a frame was named OverBudgetLabel (overBudgetID).
	overBudgetGiven bool
}

// NameID is the id samples refer to name info by (payload.NameFrames).
func (t *SymbolTable) NameID(info FrameInfo) uint64 {
	if id, ok := t.nameIDs[info]; ok {
		return id
	}
	cost := nameCost(info)
	if t.maxNameBytes > 0 && (t.nameBytes+cost > t.maxNameBytes || len(t.Names) >= maxNames) {
		return t.overBudget(info)
	}
	if len(t.Names) >= maxNames {
		return NameUnknown
	}
	return t.intern(info, cost)
}

// intern adds a name that costs the budget cost, and returns its id.
func (t *SymbolTable) intern(info FrameInfo, cost int64) uint64 {
	t.Names = append(t.Names, info)
	id := uint64(NameFirst + len(t.Names) - 1)
	t.nameIDs[info] = id
	t.nameBytes += cost
	return id
}

// FrameName is the name a named sample's frame has by id: named says it has
// one; ok that it holds for the sample (else it reads as ReplacedLabel).
func (t *SymbolTable) FrameName(id uint64) (info FrameInfo, named, ok bool) {
	switch {
	case id == NameReplaced:
		return FrameInfo{}, true, false
	case id >= NameFirst && id-NameFirst < uint64(len(t.Names)):
		return t.Names[id-NameFirst], true, true
	}
	return FrameInfo{}, false, false
}

// lookup is the name of frame key k that holds for a sample stamped st, if
// any; named says the key has a name at all.
func (t *SymbolTable) lookup(k FrameKey, st payload.GCStamp) (n *Named, named bool) {
	names := t.Frames[k]
	for i := len(names) - 1; i >= 0; i-- {
		if names[i].Span.Covers(st) {
			return &names[i], true
		}
	}
	return nil, len(names) > 0
}

// Lookup is the name of frame key k for a sample stamped st. named says
// the key has a name at all; ok that one holds for this sample.
func (t *SymbolTable) Lookup(k FrameKey, st payload.GCStamp) (info FrameInfo, named, ok bool) {
	n, named := t.lookup(k, st)
	if n == nil {
		return FrameInfo{}, named, false
	}
	return n.FrameInfo, true, true
}

// names fills ids with the ids of the names the payload's frames have for
// its sample: NameUnknown for a frame that has none (or could not be read),
// NameReplaced for one whose names all hold for other samples.
func (t *SymbolTable) names(p *payload.Payload, ids []uint64) []uint64 {
	ids = ids[:0]
	for _, f := range p.Frames {
		n, named := t.lookup(Key(p.PID, p.Gen, f), p.GC)
		switch {
		case f.Error || !named:
			ids = append(ids, NameUnknown)
		case n == nil:
			ids = append(ids, NameReplaced)
		default:
			ids = append(ids, n.ID)
		}
	}
	return ids
}

// add records a name for key k, merging it into the last one when that is
// the same name for an adjacent span of the same epoch (young code named
// again interval after interval).
func (t *SymbolTable) add(k FrameKey, n Named) {
	n.FrameInfo = t.canonical(n.FrameInfo)
	names := t.Frames[k]
	if l := len(names); l > 0 {
		last := &names[l-1]
		if last.FrameInfo == n.FrameInfo && last.Span.Epoch == n.Span.Epoch &&
			n.Span.From <= last.Span.To+2 && last.Span.From <= n.Span.To+2 && last.Span != payload.FullSpan {
			// Within an epoch only the major GC's own interval has a marking
			// half (2*epoch), and spans start after it: an odd gap of one is
			// an interval no sample can have.
			last.Span.From = min(last.Span.From, n.Span.From)
			last.Span.To = max(last.Span.To, n.Span.To)
			return
		}
	}
	if len(names) >= maxNamesPerKey {
		names = append(names[:0], names[1:]...)
	} else {
		cost := namedCost
		if len(names) == 0 {
			cost += keyOverhead
		}
		if t.maxKeyBytes > 0 && t.keyBytes+cost > t.maxKeyBytes {
			return // past the budget: its samples are named as Resolve says
		}
		t.keyBytes += cost
	}
	n.ID = t.NameID(n.FrameInfo)
	t.Frames[k] = append(names, n)
}

// VMExec is where rb_vm_exec lies in a process's Ruby binary (stripped
// builds have no symbol for it): a native frame there is one VM entry.
type VMExec struct {
	Path       string // the binary as the process maps it
	Start, End uint64 // virtual addresses in the file
}

// NewSymbolTable returns an empty table.
func NewSymbolTable() *SymbolTable {
	return &SymbolTable{Frames: map[FrameKey][]Named{}, VMExec: map[Image]VMExec{}, nameIDs: map[FrameInfo]uint64{},
		oldChecks: map[FrameKey]oldCheck{}, coarse: map[uint64]bool{}}
}

// Key is the key of a frame of a payload of process image (pid, gen).
func Key(pid, gen uint32, f payload.Frame) FrameKey {
	if f.CFrame {
		// A C frame's name is its method entry's. Its iseq slot holds what
		// the VM pushed (an IFUNC's block function, new on every call), so
		// it is left out: one name serves every call.
		return FrameKey{PID: pid, Gen: gen, PC: f.PC, CME: f.CME, CFrame: true}
	}
	return FrameKey{PID: pid, Gen: gen, Iseq: f.Iseq, PC: f.PC, CME: f.CME}
}

// Resolve names the payload's frames that the table has no name for that
// holds for the payload's sample, through r, which reads the process's live
// memory, and fills ids with the ids of the names each frame has for the
// sample (as names does). It also returns the frames it named, with the
// spans their names hold for, and how many of those are unknown.
//
// A name read now holds for the payload's sample only if nothing at the
// frame's addresses can have been freed in between: the GC stamp must be
// the same when reading starts and ends, and either the sample was taken
// in the same GC interval (the code ran then, so the GC cannot free it
// before the interval ends), or the code is in the old generation, which
// only a major GC frees (then the name holds until the epoch ends, for
// samples after now).
func (t *SymbolTable) Resolve(r *rubystack.Reader, p *payload.Payload, ids []uint64) (_ []uint64, added []payload.NamedFrame, unknown int) {
	ids = t.names(p, ids)
	var fresh []payload.Frame
	var seen map[FrameKey]bool
	for i, f := range p.Frames {
		if ids[i] >= NameFirst || ids[i] == NameUnknown && f.Error {
			continue
		}
		k := Key(p.PID, p.Gen, f)
		if info, span := t.checkedOld(k, f, p.GC); span != (payload.Span{}) {
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
			ids = t.names(p, ids)
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
		ids = t.names(p, ids)
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
	for i, f := range frames {
		// Generation first: an old object stays until the next major GC, so
		// what is read after this is of the same object.
		old[i] = oldFrame(r, f)
		names[i].FrameInfo = frameInfo(r, f)
	}
	after, err := r.GCStamp()
	read, ok := readBetween(before, after)
	if err != nil || !ok {
		return make([]Named, len(frames)), false
	}
	// What was read of young objects while a GC ran is read again.
	moved := after != before
	for i := range frames {
		if !moved {
			names[i].Span = spanFor(p.GC, before, old[i])
		}
		if !old[i] || names[i].Unknown || names[i].Drop {
			continue
		}
		names[i].Old, names[i].OldAt = true, read
		proven := provenFor(p.GC, (frames[i].IseqOld || frames[i].CFrame) && frames[i].MEOld, read)
		if !names[i].Span.Covers(p.GC) && proven {
			names[i].Back = payload.Span{Epoch: p.GC.Epoch, From: p.GC.Interval(), To: p.GC.Interval()}
		}
	}
	return names, !moved
}

// spanFor is the span a name read under GC stamp now holds for, the code
// having been seen by a sample stamped sample, and being in the old
// generation or not: the zero Span when it holds for no sample.
func spanFor(sample payload.GCStamp, now rubystack.GCStamp, old bool) payload.Span {
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

// oldFrame says whether every object a frame's name comes from is in the
// old generation: its iseq, the method entry slot of its environment, and
// the method entry that leads to.
func oldFrame(r *rubystack.Reader, f payload.Frame) bool {
	cme, err := r.LocalMethodEntry(f.CME)
	if err != nil {
		return false
	}
	objs := []uint64{f.CME, cme}
	if !f.CFrame {
		objs = append(objs, f.Iseq) // a C frame's is not in its name
	}
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

// Forget drops what Resolve added for frames of process image (pid, gen).
func (t *SymbolTable) Forget(pid, gen uint32, frames []payload.NamedFrame) {
	for _, f := range frames {
		t.dropKey(Key(pid, gen, f.Frame))
	}
}

// Stack returns the Ruby frames of a payload, leaf first, as the table names
// them for its sample; frames it does not know come out unknown, frames
// whose names hold only for other samples come out as ReplacedLabel.
func (t *SymbolTable) Stack(p *payload.Payload) []FrameInfo {
	out := make([]FrameInfo, 0, len(p.Frames))
	for _, f := range p.Frames {
		info, named, ok := t.Lookup(Key(p.PID, p.Gen, f), p.GC)
		switch {
		case f.Error || !named:
			out = append(out, FrameInfo{Label: rubystack.UnknownLabel, Unknown: true})
		case !ok:
			out = append(out, FrameInfo{Label: ReplacedLabel, Unknown: true})
		case !info.Drop:
			out = append(out, info)
		}
	}
	return out
}

// forgetImages drops the frame keys of process images that are gone, in
// one pass over the keys however many images go.
func (t *SymbolTable) forgetImages(gone map[Image]bool) {
	if len(gone) == 0 {
		return
	}
	for k := range t.Frames {
		if gone[Image{k.PID, k.Gen}] {
			t.dropKey(k)
		}
	}
	for im := range gone {
		delete(t.VMExec, im)
	}
}

// restart empties the table of names and frame keys (not the images' VM
// entries): a live recording's next samples are named afresh. Only safe
// when no sample read so far refers to a name by id any more.
func (t *SymbolTable) restart() {
	clear(t.Frames)
	clear(t.nameIDs)
	clear(t.coarse)
	t.overBudgetGiven = false
	clear(t.oldChecks) // they hold names too
	t.Names = nil
	t.nameBytes, t.keyBytes = 0, 0
}

// sameInterval says whether a sample stamped st was taken in the GC
// interval the process is in now: nothing the sample's frames ran in has
// been freed or moved since.
func sameInterval(st payload.GCStamp, now rubystack.GCStamp) bool {
	interval := payload.GCStamp{Stamped: true, Count: now.Count, Marking: now.Marking}.Interval()
	return st.Stamped && !st.Compacting && st.Epoch == now.Epoch && st.Interval() == interval
}
