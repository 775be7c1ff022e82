package symtab

import (
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

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

// MaxBytes bounds the decompressed symbol table read from a file.
const MaxBytes = 256 << 20

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
	OldAt Check
	ID    uint64 // the id samples refer to it by (NameID)
}

// Table maps frame keys to their meaning, per process, and says
// where each process's VM entry function is. A key has several names when
// the code at its addresses was freed and replaced while recording; each
// holds for the samples of its span.
type Table struct {
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
	oldChecks map[FrameKey]OldRun
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
func (t *Table) NameID(info FrameInfo) uint64 {
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
func (t *Table) intern(info FrameInfo, cost int64) uint64 {
	t.Names = append(t.Names, info)
	id := uint64(NameFirst + len(t.Names) - 1)
	t.nameIDs[info] = id
	t.nameBytes += cost
	return id
}

// FrameName is the name a named sample's frame has by id: named says it has
// one; ok that it holds for the sample (else it reads as ReplacedLabel).
func (t *Table) FrameName(id uint64) (info FrameInfo, named, ok bool) {
	switch {
	case id == NameReplaced:
		return FrameInfo{}, true, false
	case id >= NameFirst && id-NameFirst < uint64(len(t.Names)):
		return t.Names[id-NameFirst], true, true
	}
	return FrameInfo{}, false, false
}

// NameKind says what id, as a sample's frame carries it, counts as in a
// summary of names: unknown (no name, or a name read as unknown) or
// replaced (NameReplaced); FrameName's answer without copying the name.
func (t *Table) NameKind(id uint64) (unknown, replaced bool) {
	switch {
	case id == NameReplaced:
		return false, true
	case id >= NameFirst && id-NameFirst < uint64(len(t.Names)):
		return t.Names[id-NameFirst].Unknown, false
	}
	return true, false
}

// lookup is the name of frame key k that holds for a sample stamped st, if
// any; named says the key has a name at all.
func (t *Table) lookup(k FrameKey, st payload.GCStamp) (n *Named, named bool) {
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
func (t *Table) Lookup(k FrameKey, st payload.GCStamp) (info FrameInfo, named, ok bool) {
	n, named := t.lookup(k, st)
	if n == nil {
		return FrameInfo{}, named, false
	}
	return n.FrameInfo, true, true
}

// NameIDs fills ids with the ids of the names the payload's frames have for
// its sample: NameUnknown for a frame that has none (or could not be read),
// NameReplaced for one whose names all hold for other samples.
func (t *Table) NameIDs(p *payload.Payload, ids []uint64) []uint64 {
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
func (t *Table) add(k FrameKey, n Named) {
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

// New returns an empty table.
func New() *Table {
	return &Table{Frames: map[FrameKey][]Named{}, VMExec: map[Image]VMExec{}, nameIDs: map[FrameInfo]uint64{},
		oldChecks: map[FrameKey]OldRun{}, coarse: map[uint64]bool{}}
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

// Forget drops what Resolve added for frames of process image (pid, gen).
func (t *Table) Forget(pid, gen uint32, frames []payload.NamedFrame) {
	for _, f := range frames {
		t.dropKey(Key(pid, gen, f.Frame))
	}
}

// Stack returns the Ruby frames of a payload, leaf first, as the table names
// them for its sample; frames it does not know come out unknown, frames
// whose names hold only for other samples come out as ReplacedLabel.
func (t *Table) Stack(p *payload.Payload) []FrameInfo {
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

// ForgetImages drops the frame keys of process images that are gone, in
// one pass over the keys however many images go.
func (t *Table) ForgetImages(gone map[Image]bool) {
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

// Restart empties the table of names and frame keys (not the images' VM
// entries): a live recording's next samples are named afresh. Only safe
// when no sample read so far refers to a name by id any more.
func (t *Table) Restart() {
	clear(t.Frames)
	clear(t.nameIDs)
	clear(t.coarse)
	t.overBudgetGiven = false
	clear(t.oldChecks) // they hold names too
	t.Names = nil
	t.nameBytes, t.keyBytes = 0, 0
}
