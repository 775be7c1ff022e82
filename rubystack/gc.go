package rubystack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// GCStamp is where a process's garbage collector is: the count of GCs
// started, that count when the last major GC started (the epoch), and its
// phase. Code is freed, and its memory reused, only by the GC, so two reads
// of an address under the same stamp see the same object; a caller that
// names code uses stamps to say which samples a name holds for.
type GCStamp struct {
	Count, Epoch uint64
	Marking      bool // the GC is marking (only a major GC marks while Ruby runs)
	Idle         bool // neither marking nor sweeping: nothing will be freed before the next GC
	Compacting   bool // the GC is compacting: objects may move
	// Starting: a GC has started (Count counts it) and not yet set its
	// mode, which reads as idle: no object is marked or aged yet. Known
	// only where the GC's counts by kind are read with the stamp.
	Starting bool
}

// maxGCSpan bounds the one read of the GC's fields.
const maxGCSpan = 4096

// ErrGCNotRun says the process has not run a GC yet, so its counters
// cannot be checked (CheckGC): nothing has been freed either.
var ErrGCNotRun = errors.New("no GC has run yet, so its counters cannot be checked")

// ErrNoGCStamps says the Layout lacks the GC's counters (a stripped build
// whose built-in table has none).
var ErrNoGCStamps = errors.New("the layout has no GC counters")

// Objspace returns the address of the process's objspace (vm->objspace),
// where the GC keeps its counters.
func (r *Reader) Objspace() (uint64, error) {
	if !r.Layout.Capabilities.GCStamps || r.noGCStamps {
		return 0, ErrNoGCStamps
	}
	if r.objspace != 0 {
		return r.objspace, nil
	}
	os, err := r.vmPointer(r.Layout.VM.ObjSpace, "vm->objspace")
	if err != nil {
		return 0, err
	}
	r.objspace = os
	return os, nil
}

// vmPointer reads the pointer at off in the VM (rb_vm_t) of the live
// process, never from a cache: it must be a non-NULL, aligned address.
func (r *Reader) vmPointer(off int64, what string) (uint64, error) {
	if r.vmPtr == 0 {
		return 0, errNoVM
	}
	vm, err := r.direct.word(r.vmPtr)
	if err != nil {
		return 0, err
	}
	if vm == 0 {
		return 0, ErrVMNotReady
	}
	p, err := r.direct.word(vm + uint64(off))
	if err != nil {
		return 0, err
	}
	if p == 0 || p&7 != 0 {
		return 0, fmt.Errorf("%w: %s is %#x", errTorn, what, p)
	}
	return p, nil
}

// GCStamp reads the GC's progress now, from memory, never from a cache.
func (r *Reader) GCStamp() (GCStamp, error) {
	os, err := r.Objspace()
	if err != nil {
		return GCStamp{}, err
	}
	// One read of the span holding the three fields, and the GC counts by
	// kind where they fit in it (noteEpoch).
	g := &r.Layout.GC
	lo, hi := r.Layout.GCSpan()
	if lo < 0 || hi-lo > maxGCSpan {
		return GCStamp{}, fmt.Errorf("GC fields from %d to %d: %w", lo, hi, ErrNoGCStamps)
	}
	counts := false
	if g.MinorCount >= 0 && g.MajorCount >= 0 {
		if l, h := min(lo, g.MinorCount&^7, g.MajorCount&^7), max(hi, g.MinorCount+8, g.MajorCount+8); h-l <= maxGCSpan {
			lo, hi, counts = l, h, true
		}
	}
	read := func() ([]byte, error) {
		buf := make([]byte, hi-lo)
		return buf, r.direct.mem.ReadAt(buf, os+uint64(lo))
	}
	buf, err := read()
	if err != nil {
		return GCStamp{}, err
	}
	var s GCStamp
	s.Count = le64(buf[g.Count-lo:])
	s.Epoch = le64(buf[g.LastMajorGC-lo:])
	flags := binary.LittleEndian.Uint32(buf[g.Mode.Offset-lo:])
	if s.Epoch > s.Count {
		return s, fmt.Errorf("%w: the last major GC (%d) is after the GC count (%d)", errTorn, s.Epoch, s.Count)
	}
	mode := int64(flags>>g.Mode.BitOffset) & (1<<g.Mode.BitSize - 1)
	c := r.Layout.Constants
	s.Marking = mode == c["gc_mode_marking"]
	s.Idle = mode == c["gc_mode_none"]
	s.Compacting = flags>>g.Compacting.BitOffset&1 != 0
	if counts {
		// A GC's start bumps the count before its kind's (noteEpoch).
		s.Starting = le64(buf[g.MinorCount-lo:])+le64(buf[g.MajorCount-lo:]) < s.Count
		r.noteEpoch(s, buf, lo, read)
	}
	return s, nil
}

// Old says whether the object at v is in the old generation (its flags have
// RUBY_FL_PROMOTED): only a major GC frees or moves it. A special constant
// or 0 counts as old: there is nothing to free.
func (r *Reader) Old(v uint64) (bool, error) {
	if v == 0 || r.o.special(v) {
		return true, nil
	}
	flags, err := r.direct.word(v + uint64(r.Layout.Basic.Flags))
	if err != nil {
		return false, err
	}
	mask := uint64(r.Layout.Constants["RUBY_FL_PROMOTED"])
	return mask != 0 && flags&mask == mask, nil
}

// NoGCStamps makes the Reader act as if the Layout had no GC counters, for
// a caller whose samples carry no stamps.
func (r *Reader) NoGCStamps() { r.noGCStamps = true }

// DropCaches forgets every name read so far (iseqs, method entries,
// classes): a caller that knows the GC ran since they were read must not
// have them served again, since an address may now hold other code.
func (r *Reader) DropCaches() {
	clear(r.iseqs)
	clear(r.cmes)
	clear(r.classes)
}

// These bound how CheckGC waits out a running GC. Counters that disagree in
// a way a GC passes through (the count moved while read; the count one past
// minor plus major, as between a GC's count++ and its major_gc_count++ or
// minor_gc_count++; the last major GC not yet set) are read again, with
// growing pauses, for up to gcCheckBudget: a target starved of CPU can sit
// in that window for several milliseconds, so a count of quick tries is not
// enough. Any other disagreement is a wrong layout's sign and gets
// gcCheckTries reads.
const (
	gcCheckTries    = 5
	gcCheckBudget   = 250 * time.Millisecond
	gcCheckMaxPause = 20 * time.Millisecond
	gcCheckMaxReads = 64
)

// CheckGC checks the Layout's GC offsets against the live process, as
// CheckLayout does the walker's: a built-in table is a guess about a build
// (and a nearest patch release's a guess about the version). The counters
// must agree with each other: minor and major GCs add up to all GCs started,
// at least one of each kind or none, and the last major GC is among them.
func (r *Reader) CheckGC() error {
	os, err := r.Objspace()
	if err != nil {
		return err
	}
	g := &r.Layout.GC
	deadline := time.Now().Add(gcCheckBudget)
	pause := time.Millisecond
	var last error
	for read, wrong := 0, 0; read < gcCheckMaxReads; read++ {
		if read > 0 {
			if wrong >= gcCheckTries || time.Now().After(deadline) {
				break
			}
			time.Sleep(pause)
			pause = min(2*pause, gcCheckMaxPause)
		}
		var c [3]uint64
		for i, off := range []int64{g.Count, g.MinorCount, g.MajorCount} {
			if c[i], err = r.direct.word(os + uint64(off)); err != nil {
				return err
			}
		}
		s, err := r.GCStamp()
		if err != nil {
			last = err
			wrong++
			continue
		}
		count, minor, major := c[0], c[1], c[2]
		switch {
		case s.Count != count:
			last = fmt.Errorf("the GC count moved while read (%d, then %d)", count, s.Count)
		case count == 0 && minor == 0 && major == 0 && s.Epoch == 0:
			return ErrGCNotRun
		case minor+major+1 == count:
			last = fmt.Errorf("a GC stayed between counting itself (%d) and its kind (%d minor, %d major)", count, minor, major)
		case minor+major != count:
			last = fmt.Errorf("%d minor and %d major GCs do not add up to %d", minor, major, count)
			wrong++
		case major == 1 && s.Epoch == 0:
			last = fmt.Errorf("the first major GC stayed before setting its start (%d of %d)", major, count)
		case (major == 0) != (s.Epoch == 0) || s.Epoch > count:
			last = fmt.Errorf("the last major GC at %d does not fit %d major GCs of %d", s.Epoch, major, count)
			wrong++
		default:
			return nil
		}
	}
	return fmt.Errorf("%w: the GC counters at the layout's offsets (%s) do not agree: %v", ErrNoGCStamps, r.Layout.Source, last)
}

// ErrAgeUnknown says the layout does not tell where a young object's age
// is: its flags hold one bit (3.3 and later), and the layout has no
// heap_page (a built-in table without it).
var ErrAgeUnknown = errors.New("the object's age is not in its flags")

// MaxAge is the age of an object in the old generation: each GC whose
// marking reaches a young object makes it one older, up to this.
const MaxAge = 3

// Age returns how many GC markings the object at v has survived, up to
// MaxAge (old): from its flags (Layout.AgeBits, up to Ruby 3.2) or its
// heap page's age bits (Layout.HeapPage, from 3.3). A special constant or 0
// is MaxAge: there is nothing to free. Where the layout tells neither, an
// old object is MaxAge and a young one ErrAgeUnknown.
func (r *Reader) Age(v uint64) (int, error) {
	if v == 0 || r.o.special(v) {
		return MaxAge, nil
	}
	if r.Layout.Constants["RUBY_FL_PROMOTED"] == 0 {
		return 0, ErrAgeUnknown
	}
	var o [1]SlotObject
	var ok [1]bool
	if err := r.readSlots([]uint64{v}, o[:], ok[:], false); err != nil {
		return 0, err
	}
	switch {
	case !ok[0]:
		return 0, fmt.Errorf("object %#x: could not be read", v)
	case o[0].AgeKnown:
		return o[0].Age, nil
	case !r.AgesKnown():
		return 0, ErrAgeUnknown
	}
	return 0, fmt.Errorf("%w: the heap page of %#x gives no age", errTorn, v)
}

// AgesKnown says whether the layout tells a young object's age (Age): in
// its flags, or in its heap page.
func (r *Reader) AgesKnown() bool {
	_, _, flags := r.Layout.AgeBits()
	return flags || r.Layout.AgesInPages()
}
