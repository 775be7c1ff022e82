package rubystack

import (
	"context"
	"encoding/binary"
	"fmt"
)

// HeapPages is what a walk of the heap found of its pages: how many, their
// slots, how many were free, and what could not be read.
type HeapPages struct {
	Pages     int    `json:"pages"`
	Slots     uint64 `json:"slots"`      // slots in every page
	FreeSlots uint64 `json:"free_slots"` // slots holding no object (flags 0)
	HeapBytes uint64 `json:"heap_bytes"` // bytes of every page's slots
	// UnreadPages counts pages that went away under the read or whose
	// header made no sense: their slots are in no other count.
	UnreadPages int `json:"unread_pages"`
}

// heapObjspace is the address of the objspace whose heap pages a walk
// reads, where the layout tells how to walk them.
func (r *Reader) heapObjspace() (uint64, error) {
	if r.Layout.Heap.Pages < 0 {
		return 0, ErrNoHeapLayout
	}
	if r.Layout.Basic.Flags != 0 || r.Layout.Basic.Klass != 8 {
		return 0, fmt.Errorf("%w: RBasic is not flags then klass", ErrNoHeapLayout)
	}
	return r.vmPointer(r.Layout.VM.ObjSpace, "vm->objspace")
}

// walkHeap reads the GC's heap pages of the objspace at objs, each page's
// slots in one read, and calls visit with each slot that holds an object:
// its address, its size and its bytes (valid during the call only); page,
// when not nil, first sees each page's slots whole.
func (r *Reader) walkHeap(ctx context.Context, objs uint64, c *HeapPages, page func(body []byte, size uint64),
	visit func(addr, size uint64, slot []byte)) error {
	h := &r.Layout.Heap
	pages, err := r.heapPages(objs)
	if err != nil {
		return err
	}
	var hdr [64]byte
	hdrLen := int(max(h.Start+8, h.TotalSlots.Offset+2, h.SlotSize.Offset+2))
	if hdrLen > len(hdr) || h.Start < 0 || h.TotalSlots.Offset < 0 || h.SlotSize.Offset < 0 {
		return fmt.Errorf("%w: heap_page start at %d", ErrNoHeapLayout, h.Start)
	}
	buf := make([]byte, maxPageBytes)
	for i, p := range pages {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := r.direct.mem.ReadAt(hdr[:hdrLen], p); err != nil {
			c.UnreadPages++
			continue
		}
		start := binary.LittleEndian.Uint64(hdr[h.Start:])
		total := uint64(binary.LittleEndian.Uint16(hdr[h.TotalSlots.Offset:]))
		size := uint64(binary.LittleEndian.Uint16(hdr[h.SlotSize.Offset:]))
		if total == 0 {
			c.Pages++ // an empty page, kept for reuse (4.0 zeroes it)
			continue
		}
		if start == 0 || start%8 != 0 || size < minSlotSize || size%8 != 0 || total > maxPageSlots ||
			total*size > maxPageBytes {
			c.UnreadPages++
			continue
		}
		body := buf[:total*size]
		if err := r.direct.mem.ReadAt(body, start); err != nil {
			c.UnreadPages++
			continue
		}
		c.Pages++
		c.Slots += total
		c.HeapBytes += total * size
		if page != nil {
			page(body, size)
		}
		for off := uint64(0); off < total*size; off += size {
			if le64(body[off:]) == 0 {
				c.FreeSlots++
				continue
			}
			visit(start+off, size, body[off:off+size])
		}
	}
	return nil
}
