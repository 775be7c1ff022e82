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
	// WBUnprotected: the slot's bit in its page's wb_unprotected_bits is
	// set: the object has no write barriers, and the GC never ages it (its
	// age proves nothing). WBKnown where the layout tells it.
	WBUnprotected, WBKnown bool
}

// Type is the object's type tag (RUBY_T_*), 0 for a free slot.
func (o SlotObject) Type(r *Reader) uint64 { return o.Flags & r.o.tMask }

// ReadSlot reads the slot at addr now, never from a cache.
func (r *Reader) ReadSlot(addr uint64) (SlotObject, error) {
	var o [1]SlotObject
	var ok [1]bool
	if err := r.ReadSlots([]uint64{addr}, o[:], ok[:]); err != nil {
		return SlotObject{}, err
	}
	if !ok[0] {
		// Its cause, from one more read.
		var b [16]byte
		if err := r.direct.mem.ReadAt(b[:], addr); err != nil {
			return SlotObject{}, err
		}
		return SlotObject{}, fmt.Errorf("slot %#x: could not be read", addr)
	}
	return o[0], nil
}

// ReadSlots reads the slots at addrs now, never from a cache, in a few
// system calls however many there are: out[i] is what addrs[i] holds
// where ok[i], with its age, mark bit and write-barrier bit where they
// could be read (else AgeKnown, MarkKnown, WBKnown false). All three
// slices have one length.
func (r *Reader) ReadSlots(addrs []uint64, out []SlotObject, ok []bool) error {
	return r.readSlots(addrs, out, ok, true)
}

// readSlots is ReadSlots, reading the mark and write-barrier bits only
// where bits says.
func (r *Reader) readSlots(addrs []uint64, out []SlotObject, ok []bool, bits bool) error {
	if r.Layout.Basic.Flags != 0 || r.Layout.Basic.Klass != 8 {
		return errors.New("RBasic is not flags then klass")
	}
	if len(out) != len(addrs) || len(ok) != len(addrs) {
		return errors.New("ReadSlots: slices of different lengths")
	}
	buf := make([]byte, 16*len(addrs))
	pieces := make([][]byte, len(addrs))
	for i := range pieces {
		pieces[i] = buf[16*i : 16*i+16]
	}
	readPieces(r.direct.mem, pieces, addrs, ok)
	promoted := uint64(r.Layout.Constants["RUBY_FL_PROMOTED"])
	mask, shift, inFlags := r.Layout.AgeBits()
	agesInPages, marksInPages := r.Layout.AgesInPages(), bits && r.Layout.MarksInPages()
	wbInPages := bits && r.Layout.WBUnprotectedInPages()
	var headers words // each slot's page header: where its struct heap_page is
	pageOf := make([]int, len(addrs))
	for i := range addrs {
		pageOf[i] = -1
		if !ok[i] {
			continue
		}
		o := SlotObject{Flags: binary.LittleEndian.Uint64(pieces[i]), Klass: binary.LittleEndian.Uint64(pieces[i][8:])}
		if o.Flags != 0 {
			switch {
			case promoted != 0 && o.Flags&promoted == promoted:
				o.Age, o.AgeKnown = MaxAge, true
			case inFlags:
				o.Age, o.AgeKnown = int(o.Flags&mask>>shift), true
			}
			if agesInPages && !o.AgeKnown || marksInPages || wbInPages {
				pageOf[i] = headers.add(r.pageHeader(addrs[i]))
			}
		}
		out[i] = o
	}
	if len(headers.addrs) == 0 {
		return nil
	}
	headers.read(r.direct.mem)
	// The bitmap words: two bits of age a slot, one of marking, one of
	// write barriers.
	h := &r.Layout.HeapPage
	const agesPerWord = 64 / 2
	var bitmaps words
	ageAt, markAt, wbAt := make([]int, len(addrs)), make([]int, len(addrs)), make([]int, len(addrs))
	for i, pg := range pageOf {
		ageAt[i], markAt[i], wbAt[i] = -1, -1, -1
		if pg < 0 || !headers.ok[pg] {
			continue
		}
		page := headers.vals[pg]
		if page == 0 || page&7 != 0 {
			continue // torn: the age and mark stay unknown
		}
		slot := r.slotIndex(addrs[i])
		if agesInPages && !out[i].AgeKnown {
			if w := slot / agesPerWord * 8; w+8 <= uint64(h.AgeBitsSize) {
				ageAt[i] = bitmaps.add(page + uint64(h.AgeBits) + w)
			}
		}
		if marksInPages {
			markAt[i] = bitmaps.add(page + uint64(h.MarkBits) + slot/64*8)
		}
		if wbInPages {
			wbAt[i] = bitmaps.add(page + uint64(h.WBUnprotectedBits) + slot/64*8)
		}
	}
	bitmaps.read(r.direct.mem)
	for i := range addrs {
		slot := r.slotIndex(addrs[i])
		if a := ageAt[i]; a >= 0 && bitmaps.ok[a] {
			out[i].Age, out[i].AgeKnown = int(bitmaps.vals[a]>>(slot%agesPerWord*2)&MaxAge), true
		}
		if m := markAt[i]; m >= 0 && bitmaps.ok[m] {
			out[i].Marked, out[i].MarkKnown = bitmaps.vals[m]>>(slot%64)&1 != 0, true
		}
		if w := wbAt[i]; w >= 0 && bitmaps.ok[w] {
			out[i].WBUnprotected, out[i].WBKnown = bitmaps.vals[w]>>(slot%64)&1 != 0, true
		}
	}
	return nil
}

// pageHeader is where the heap page body holding v keeps the address of
// its struct heap_page.
func (r *Reader) pageHeader(v uint64) uint64 {
	h := &r.Layout.HeapPage
	return v&^(uint64(h.Align)-1) + uint64(h.Page)
}

// slotIndex is v's bit in its page's bitmaps: one a slot, numbered in the
// smallest slot's size from the start of the page's aligned body.
func (r *Reader) slotIndex(v uint64) uint64 {
	h := &r.Layout.HeapPage
	return (v & (uint64(h.Align) - 1)) / uint64(h.SlotSize)
}

// words is a set of words to read at once, each address once.
type words struct {
	addrs []uint64
	index map[uint64]int
	vals  []uint64
	ok    []bool
}

// add puts addr in the set and returns its index.
func (w *words) add(addr uint64) int {
	if i, ok := w.index[addr]; ok {
		return i
	}
	if w.index == nil {
		w.index = map[uint64]int{}
	}
	w.index[addr] = len(w.addrs)
	w.addrs = append(w.addrs, addr)
	return len(w.addrs) - 1
}

// read reads every word of the set.
func (w *words) read(mem Memory) {
	buf := make([]byte, 8*len(w.addrs))
	pieces := make([][]byte, len(w.addrs))
	for i := range pieces {
		pieces[i] = buf[8*i : 8*i+8]
	}
	w.ok = make([]bool, len(w.addrs))
	readPieces(mem, pieces, w.addrs, w.ok)
	w.vals = make([]uint64, len(w.addrs))
	for i := range w.vals {
		w.vals[i] = binary.LittleEndian.Uint64(pieces[i])
	}
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
