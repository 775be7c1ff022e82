package rubystack

import (
	"context"
	"errors"
	"fmt"
)

// Bounds on a census of the heap: everything in it is read from the
// target, so the page list, each page and the classes named are bounded.
const (
	maxHeapPages  = 1 << 22  // pages listed (256 GiB of 64 KiB pages)
	maxPageBytes  = 1 << 20  // one page's slots (64 KiB in every Ruby so far)
	maxPageSlots  = 1 << 16  // total_slots is a 16-bit count
	minSlotSize   = 16       // RBasic: flags and klass
	pageListChunk = 64 << 10 // bytes of the page list read at a time
)

// ErrNoHeapLayout says the layout does not say where the GC lists its heap
// pages (Layout.Heap), so the heap cannot be counted.
var ErrNoHeapLayout = errors.New("the layout does not say where the GC lists its heap pages")

// Count is a number of objects, the slot bytes they occupy and the bytes
// they own beyond their slots where the layout tells (OffSlot: a string's
// or an array's own buffer, as ObjectSpace.memsize_of counts it).
type Count struct {
	Objects uint64 `json:"objects"`
	Bytes   uint64 `json:"bytes"`
	OffSlot uint64 `json:"off_slot_bytes"`
	// Old counts the objects in the old generation (RUBY_FL_PROMOTED:
	// they survived three GCs), which only a major GC frees: what a
	// leak accumulates, and garbage seldom reaches.
	Old uint64 `json:"old"`
}

func (c *Count) add(bytes, offSlot uint64, old bool) {
	c.Objects++
	c.Bytes += bytes
	c.OffSlot += offSlot
	if old {
		c.Old++
	}
}

// HeapCensus is the live heap of a process as its heap pages held it when
// read: every slot, counted by the object's type and by its class as
// ObjectSpace would name it (Object#class). Objects Ruby hides from Ruby
// code (ObjectSpace.each_object skips them: internal strings and arrays,
// imemos, iclasses, a class's internal singleton class) are counted under
// their type in parentheses, "(T_IMEMO)".
type HeapCensus struct {
	HeapPages
	// ByType counts objects by type tag, as ObjectSpace.count_objects
	// does ("T_STRING"; a free slot is no object).
	ByType map[string]Count `json:"by_type"`
	// ByClass counts objects by class path ("String", "Foo::Bar") or, for
	// hidden objects, "(T_X)".
	ByClass map[string]Count `json:"by_class"`
	// UnnamedClass counts objects whose class could not be named (their
	// slots are in Slots, their objects in ByType and under
	// UnnamedClassLabel).
	UnnamedClass  uint64 `json:"unnamed_class"`
	GC            GCStamp
	GCRead        bool `json:"-"` // GC holds the stamp read before the census
	MajorGCs      uint64
	MajorGCsKnown bool `json:"-"`
}

// UnnamedClassLabel is ByClass's key for objects whose class could not be
// read (a class freed or moved under a census of a running process).
const UnnamedClassLabel = "[class not read]"

// HeapCensus counts the live heap of the process, page by page. It reads
// while the process runs unless the caller stopped it (Freeze): then its
// counts are exactly ObjectSpace's. A running process's pages may be freed
// or reused under the read; what could not be read is counted as such.
func (r *Reader) HeapCensus(ctx context.Context) (*HeapCensus, error) {
	objs, err := r.heapObjspace()
	if err != nil {
		return nil, err
	}
	c := &HeapCensus{ByType: map[string]Count{}, ByClass: map[string]Count{}}
	if s, err := r.GCStamp(); err == nil {
		c.GC, c.GCRead = s, true
	}
	cr := censusReader{r: r, sizes: r.memsizer(), byKlass: map[censusKey]*Count{}, promoted: uint64(r.Layout.Constants["RUBY_FL_PROMOTED"]),
		singleton: uint64(r.Layout.Constants["RUBY_FL_SINGLETON"])}
	for _, name := range hiddenTypes {
		if v, ok := r.Layout.Constants["RUBY_"+name]; ok && v >= 0 && v < 32 {
			cr.hidden[v] = true
		}
	}
	if r.frozenCore != 0 {
		cr.frozenCore, _ = r.direct.word(r.frozenCore)
	}
	err = r.walkHeap(ctx, objs, &c.HeapPages, cr.sizes.prefetch, func(addr, size uint64, slot []byte) {
		cr.slot(c, addr, size, slot)
	})
	if err != nil {
		return nil, err
	}
	cr.finish(c)
	if c.GCRead && r.Layout.GC.MajorCount >= 0 {
		if n, err := r.direct.word(objs + uint64(r.Layout.GC.MajorCount)); err == nil {
			c.MajorGCs, c.MajorGCsKnown = n, true
		}
	}
	return c, nil
}

// heapPages reads the GC's list of heap pages: their struct heap_page
// addresses.
func (r *Reader) heapPages(os uint64) ([]uint64, error) {
	h := &r.Layout.Heap
	list, err := r.direct.word(os + uint64(h.Pages))
	if err != nil {
		return nil, fmt.Errorf("heap page list: %w", err)
	}
	var n uint64
	if h.Darray {
		if list == 0 {
			return nil, nil // no page yet
		}
		if n, err = r.direct.word(list + uint64(h.DarrayLen)); err != nil {
			return nil, fmt.Errorf("heap page list length: %w", err)
		}
		list += uint64(h.DarrayData)
	} else if n, err = r.direct.word(os + uint64(h.Count)); err != nil {
		return nil, fmt.Errorf("heap page count: %w", err)
	}
	if n > maxHeapPages {
		return nil, fmt.Errorf("%w: %d heap pages, more than %d", errTorn, n, maxHeapPages)
	}
	if n > 0 && (list == 0 || list%8 != 0) {
		return nil, fmt.Errorf("%w: heap page list at %#x", errTorn, list)
	}
	pages := make([]uint64, 0, n)
	buf := make([]byte, min(n*8, pageListChunk))
	for at := uint64(0); at < n*8; at += uint64(len(buf)) {
		b := buf[:min(uint64(len(buf)), n*8-at)]
		if err := r.direct.mem.ReadAt(b, list+at); err != nil {
			return nil, fmt.Errorf("heap page list at %#x: %w", list+at, err)
		}
		for i := 0; i+8 <= len(b); i += 8 {
			if p := le64(b[i:]); p != 0 && p%8 == 0 {
				pages = append(pages, p)
			}
		}
	}
	return pages, nil
}

// censusReader counts the objects of a census by type and by (klass,
// type), and names the classes once the pages are read.
type censusReader struct {
	r          *Reader
	sizes      memsizer
	frozenCore uint64 // RubyVM::FrozenCore, which Ruby hides, or 0
	promoted   uint64 // RUBY_FL_PROMOTED
	singleton  uint64 // RUBY_FL_SINGLETON
	types      [32]Count
	byKlass    map[censusKey]*Count
	hidden     [32]bool // by type: hidden from ObjectSpace (hiddenTypes)
	// recent are the last keys counted and their counts: neighbours are
	// often of one class, or of a few (an object and its strings).
	recent [4]struct {
		k censusKey
		n *Count
	}
	next int // the entry of recent to replace next
}

// censusKey is what names an object's class: its klass and type (hidden
// types are keyed with klass 0); a class's internal singleton class is
// keyed by its own address, with internalSingleton set.
type censusKey struct {
	klass, typ        uint64
	internalSingleton bool
}

// maxCensusKeys bounds the (klass, type) pairs a census keeps apart; past
// it, objects are counted unnamed.
const maxCensusKeys = 1 << 18

// slot counts the slot at addr, whose RBasic is flags and klass, as
// count_objects and each_object would.
func (cr *censusReader) slot(c *HeapCensus, addr, size uint64, slot []byte) {
	r := cr.r
	flags, klass := le64(slot), le64(slot[8:])
	typ := flags & r.o.tMask
	old := flags&cr.promoted == cr.promoted && cr.promoted != 0
	off, _ := cr.sizes.offSlot(typ, flags, slot)
	cr.types[typ&31].add(size, off, old)
	k := censusKey{klass: klass, typ: typ}
	switch {
	case klass == 0 || cr.hidden[typ&31] || addr == cr.frozenCore:
		k.klass = 0
	case typ == r.o.tClass && flags&cr.singleton != 0:
		if internal, err := r.internalSingleton(addr, klass); err != nil {
			k = censusKey{klass: 1, typ: typ} // unnamed
		} else if internal {
			k = censusKey{typ: typ, internalSingleton: true}
		}
	}
	cr.count(k).add(size, off, old)
}

// count is the count of objects of key k.
func (cr *censusReader) count(k censusKey) *Count {
	for i := range cr.recent {
		if e := &cr.recent[i]; e.n != nil && e.k == k {
			return e.n
		}
	}
	n, ok := cr.byKlass[k]
	if !ok {
		if len(cr.byKlass) >= maxCensusKeys {
			n = cr.byKlass[censusKey{klass: 1, typ: k.typ}]
		}
		if n == nil {
			n = new(Count)
			if len(cr.byKlass) >= maxCensusKeys {
				k = censusKey{klass: 1, typ: k.typ}
			}
			cr.byKlass[k] = n
		}
	}
	cr.recent[cr.next].k, cr.recent[cr.next].n = k, n
	cr.next = (cr.next + 1) % len(cr.recent)
	return n
}

// hiddenTypes are the types ObjectSpace hides every object of
// (internal_object_p): free, moved, imemo, iclass, zombie, node.
var hiddenTypes = []string{"T_NONE", "T_MOVED", "T_IMEMO", "T_ICLASS", "T_ZOMBIE", "T_NODE"}

// finish names what was counted into c.
func (cr *censusReader) finish(c *HeapCensus) {
	r := cr.r
	for typ, n := range cr.types {
		if n.Objects == 0 {
			continue
		}
		name, ok := r.typeName(uint64(typ))
		if !ok {
			name = fmt.Sprintf("T_%#x", typ)
		}
		c.ByType[name] = n
	}
	names := map[uint64]string{}
	for k, n := range cr.byKlass {
		name := cr.className(k, names)
		sum := c.ByClass[name]
		sum.Objects += n.Objects
		sum.Bytes += n.Bytes
		sum.OffSlot += n.OffSlot
		sum.Old += n.Old
		c.ByClass[name] = sum
		if name == UnnamedClassLabel {
			c.UnnamedClass += n.Objects
		}
	}
}

// className is what the census counts objects of key k under: their
// class's path as Object#class names it, or "(T_X)" for objects ObjectSpace
// hides. names caches a klass's class path.
func (cr *censusReader) className(k censusKey, names map[uint64]string) string {
	r := cr.r
	if k.klass == 0 || k.internalSingleton {
		name, ok := r.typeName(k.typ)
		if !ok {
			name = fmt.Sprintf("T_%#x", k.typ)
		}
		return "(" + name + ")"
	}
	if k.klass == 1 {
		return UnnamedClassLabel
	}
	if name, ok := names[k.klass]; ok {
		return name
	}
	name := UnnamedClassLabel
	if c, err := r.classOfKlass(k.klass); err == nil {
		if p, err := r.classPath(c); err == nil {
			name = p
		}
	}
	names[k.klass] = name
	return name
}

// internalSingleton is rb_singleton_class_internal_p: a singleton class
// attached to a class, which has no singleton class of its own, is
// internal to the VM (each_object skips it).
func (r *Reader) internalSingleton(sklass, meta uint64) (bool, error) {
	attached, err := r.attached(sklass)
	if err != nil {
		return false, err
	}
	if r.o.special(attached) {
		return false, nil
	}
	t, err := r.o.typeOf(attached)
	if err != nil || t != r.o.tClass {
		return false, err
	}
	mf, err := r.o.flags(meta)
	if err != nil {
		return false, err
	}
	if mf&r.o.tMask != r.o.tClass || mf&uint64(r.Layout.Constants["RUBY_FL_SINGLETON"]) == 0 {
		return true, nil
	}
	back, err := r.attached(meta)
	if err != nil {
		return false, err
	}
	return back != sklass, nil
}
