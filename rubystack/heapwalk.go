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
	hdrLen := int(max(h.Start+8, h.TotalSlots.Offset+2, h.SlotSize.Offset+2))
	if hdrLen > 64 || h.Start < 0 || h.TotalSlots.Offset < 0 || h.SlotSize.Offset < 0 {
		return fmt.Errorf("%w: heap_page start at %d", ErrNoHeapLayout, h.Start)
	}
	// Pages are read walkBatch at a time: their headers in one call, then
	// their slots in as few as walkBatchBytes allow.
	hdrs := make([]byte, walkBatch*hdrLen)
	bodies := make([]byte, walkBatchBytes)
	var (
		pieces [][]byte
		addrs  []uint64
		ok     []bool
		found  []pageFound
	)
	for i := 0; i < len(pages); i += walkBatch {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := pages[i:min(i+walkBatch, len(pages))]
		pieces, addrs = pieces[:0], addrs[:0]
		for j, p := range batch {
			pieces = append(pieces, hdrs[j*hdrLen:(j+1)*hdrLen])
			addrs = append(addrs, p)
		}
		ok = r.readPieces(pieces, addrs, ok)
		found = found[:0]
		for j := range batch {
			if !ok[j] {
				c.UnreadPages++
				continue
			}
			hdr := pieces[j]
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
			found = append(found, pageFound{start, total, size})
		}
		for len(found) > 0 {
			// As many pages as fit the buffer, at least one.
			n, used := 0, uint64(0)
			pieces, addrs = pieces[:0], addrs[:0]
			for ; n < len(found) && (n == 0 || used+found[n].total*found[n].size <= walkBatchBytes); n++ {
				f := found[n]
				pieces = append(pieces, bodies[used:used+f.total*f.size])
				addrs = append(addrs, f.start)
				used += f.total * f.size
			}
			ok = r.readPieces(pieces, addrs, ok)
			for j, f := range found[:n] {
				if !ok[j] {
					c.UnreadPages++
					continue
				}
				body := pieces[j]
				c.Pages++
				c.Slots += f.total
				c.HeapBytes += f.total * f.size
				if page != nil {
					page(body, f.size)
				}
				for off := uint64(0); off < f.total*f.size; off += f.size {
					if le64(body[off:]) == 0 {
						c.FreeSlots++
						continue
					}
					visit(f.start+off, f.size, body[off:off+f.size])
				}
			}
			found = found[n:]
		}
	}
	return nil
}

// Pages a walk reads at once, and the most bytes of their slots.
const (
	walkBatch      = 256
	walkBatchBytes = 4 << 20
)

// pageFound is a heap page whose header a walk read: its slots' address,
// count and size.
type pageFound struct{ start, total, size uint64 }

// readPieces reads pieces from addrs, in one system call where the memory
// can (PieceReader), and returns which were read whole (in ok, reused).
func (r *Reader) readPieces(pieces [][]byte, addrs []uint64, ok []bool) []bool {
	ok = append(ok[:0], make([]bool, len(pieces))...)
	readPieces(r.direct.mem, pieces, addrs, ok)
	return ok
}
