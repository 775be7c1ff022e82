package rubystack

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SlotObject is what a heap slot holds when read: the struct RBasic of
// its object (flags 0: none) and, where the layout tells it, the object's
// age (GC markings survived, up to MaxAge: old).
type SlotObject struct {
	Flags, Klass uint64
	Age          int
	AgeKnown     bool
	// Marked: the slot's bit in its page's mark bits is set: the last
	// marking reached the object (once its page is swept, only an old
	// object's is). MarkKnown where the layout tells it.
	Marked, MarkKnown bool
}

// Type is the object's type tag (RUBY_T_*), 0 for a free slot.
func (o SlotObject) Type(r *Reader) uint64 { return o.Flags & r.o.tMask }

// ReadSlot reads the slot at addr now, never from a cache.
func (r *Reader) ReadSlot(addr uint64) (SlotObject, error) {
	var b [16]byte
	if r.Layout.Basic.Flags != 0 || r.Layout.Basic.Klass != 8 {
		return SlotObject{}, errors.New("RBasic is not flags then klass")
	}
	if err := r.direct.mem.ReadAt(b[:], addr); err != nil {
		return SlotObject{}, err
	}
	o := SlotObject{Flags: binary.LittleEndian.Uint64(b[:]), Klass: binary.LittleEndian.Uint64(b[8:])}
	if o.Flags == 0 {
		return o, nil
	}
	promoted := uint64(r.Layout.Constants["RUBY_FL_PROMOTED"])
	switch mask, shift, inFlags := r.Layout.AgeBits(); {
	case promoted != 0 && o.Flags&promoted == promoted:
		o.Age, o.AgeKnown = MaxAge, true
	case inFlags:
		o.Age, o.AgeKnown = int(o.Flags&mask>>shift), true
	case r.Layout.AgesInPages():
		age, err := r.pageAge(addr)
		if err != nil {
			return o, nil // the object, its age unknown
		}
		o.Age, o.AgeKnown = age, true
	}
	if r.Layout.MarksInPages() {
		if m, err := r.pageBit(addr, r.Layout.HeapPage.MarkBits); err == nil {
			o.Marked, o.MarkKnown = m, true
		}
	}
	return o, nil
}

// pageBit reads the slot at v's bit in the bitmap at off in its struct
// heap_page (one bit a slot, numbered in the smallest slot's size from the
// start of the page's aligned body).
func (r *Reader) pageBit(v uint64, off int64) (bool, error) {
	h := &r.Layout.HeapPage
	align := uint64(h.Align)
	page, err := r.direct.word(v&^(align-1) + uint64(h.Page))
	if err != nil {
		return false, err
	}
	if page == 0 || page&7 != 0 {
		return false, fmt.Errorf("%w: the heap page of %#x is at %#x", errTorn, v, page)
	}
	slot := (v & (align - 1)) / uint64(h.SlotSize)
	bits, err := r.direct.word(page + uint64(off) + slot/64*8)
	if err != nil {
		return false, err
	}
	return bits>>(slot%64)&1 != 0, nil
}

// CompactCount reads how many compactions the GC has run (GC.stat's
// compact_count); false where the layout does not say.
func (r *Reader) CompactCount() (uint64, bool) {
	if r.Layout.GC.CompactCount < 0 {
		return 0, false
	}
	os, err := r.Objspace()
	if err != nil {
		return 0, false
	}
	n, err := r.direct.word(os + uint64(r.Layout.GC.CompactCount))
	return n, err == nil
}
