package rubystack

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
)

// maxDumpReferences bounds the elements of one array a heap dump lists.
const maxDumpReferences = 1 << 20

// HeapDump is what DumpHeap wrote: the pages walked and the objects
// written.
type HeapDump struct {
	HeapPages
	Objects uint64 `json:"objects"`
	// CutReferences counts arrays whose elements could not be read, or
	// not all of them (over maxDumpReferences): their lines list none, or
	// the first ones.
	CutReferences uint64 `json:"cut_references"`
}

// DumpHeap writes every object of the heap to w as a JSON line in the
// shape ObjectSpace.dump_all gives it, so that tools reading its dumps read
// this one: "address", "type" (without "T_"), "slot_size", "class" (its
// klass's address: a singleton class where it has one; none for an
// imemo), "frozen",
// "embedded" for strings and arrays, "length" and "references" (the
// elements that are objects) for arrays, a class's or module's "name",
// "memsize" (the slot and what the census counts beyond it), and
// "flags": {"old": true} for the old generation. What the layout does not
// tell (allocation sites, instance variables, hash contents, a string's
// value) is left out. Like HeapCensus, it reads a running process unless
// the caller stopped it.
func (r *Reader) DumpHeap(ctx context.Context, w io.Writer) (*HeapDump, error) {
	objs, err := r.heapObjspace()
	if err != nil {
		return nil, err
	}
	d := &heapDumper{r: r, sizes: r.memsizer(), w: bufio.NewWriterSize(w, 1<<20),
		promoted: uint64(r.Layout.Constants["RUBY_FL_PROMOTED"]), frozen: uint64(r.Layout.Constants["RUBY_FL_FREEZE"])}
	for typ := range d.types {
		if name, ok := r.typeName(uint64(typ)); ok {
			d.types[typ] = strings.TrimPrefix(name, "T_")
		} else {
			d.types[typ] = "T_" + strconv.Itoa(typ)
		}
	}
	out := &HeapDump{}
	var werr error
	err = r.walkHeap(ctx, objs, &out.HeapPages, d.sizes.prefetch, func(addr, size uint64, slot []byte) {
		if werr == nil {
			werr = d.object(out, addr, size, slot)
			out.Objects++
		}
	})
	if err == nil {
		err = werr
	}
	if err == nil {
		err = d.w.Flush()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// heapDumper writes one heap dump's lines.
type heapDumper struct {
	r                *Reader
	sizes            memsizer
	w                *bufio.Writer
	promoted, frozen uint64
	types            [32]string
	line             []byte
	refs             []byte // an array's elements, read
}

func (d *heapDumper) object(out *HeapDump, addr, size uint64, slot []byte) error {
	r := d.r
	flags, klass := le64(slot), le64(slot[8:])
	typ := flags & r.o.tMask
	b := append(d.line[:0], `{"address":"0x`...)
	b = strconv.AppendUint(b, addr, 16)
	b = append(b, `", "type":"`...)
	b = append(b, d.types[typ&31]...)
	b = append(b, `", "slot_size":`...)
	b = strconv.AppendUint(b, size, 10)
	if klass != 0 && typ != r.o.tIMemo { // an imemo's second word is no class
		b = append(b, `, "class":"0x`...)
		b = strconv.AppendUint(b, klass, 16)
		b = append(b, '"')
	}
	if d.frozen != 0 && flags&d.frozen != 0 {
		b = append(b, `, "frozen":true`...)
	}
	switch typ {
	case r.o.tString:
		b = appendBool(b, "embedded", flags&r.o.strNoEmbed == 0)
	case r.o.tArray:
		b = d.array(b, out, flags, slot)
	case r.o.tClass, r.o.tModule:
		if name, err := r.classPath(addr); err == nil && !strings.HasPrefix(name, "#<") {
			b = append(b, `, "name":`...)
			b = appendJSONString(b, name)
		}
	}
	off, _ := d.sizes.offSlot(typ, flags, slot)
	b = append(b, `, "memsize":`...)
	b = strconv.AppendUint(b, size+off, 10)
	if d.promoted != 0 && flags&d.promoted == d.promoted {
		b = append(b, `, "flags":{"old":true}`...)
	}
	b = append(b, "}\n"...)
	d.line = b
	_, err := d.w.Write(b)
	return err
}

// array appends an array's "embedded", "length" and "references": its
// elements that are objects, read from its slot or its own buffer.
func (d *heapDumper) array(b []byte, out *HeapDump, flags uint64, slot []byte) []byte {
	r, a := d.r, &d.r.Layout.Array
	var n uint64
	var elems []byte
	embedded := flags&r.o.aryEmbed != 0
	b = appendBool(b, "embedded", embedded)
	if embedded {
		n = (flags & r.o.aryEmbedLenMask) >> r.o.aryEmbedLenShift
		at := uint64(a.EmbedBytes)
		if a.EmbedBytes < 0 || at+8*n > uint64(len(slot)) {
			out.CutReferences++
			return b
		}
		elems = slot[at : at+8*n]
	} else {
		if a.HeapLen < 0 || a.HeapPtr < 0 || a.HeapLen+8 > int64(len(slot)) || a.HeapPtr+8 > int64(len(slot)) {
			out.CutReferences++
			return b
		}
		n = le64(slot[a.HeapLen:])
		ptr := le64(slot[a.HeapPtr:])
		k := min(n, maxDumpReferences)
		if k < n {
			out.CutReferences++
		}
		if uint64(cap(d.refs)) < 8*k {
			d.refs = make([]byte, 8*k)
		}
		elems = d.refs[:8*k]
		if k > 0 && r.direct.mem.ReadAt(elems, ptr) != nil {
			out.CutReferences++
			elems = nil
		}
	}
	b = append(b, `, "length":`...)
	b = strconv.AppendUint(b, n, 10)
	first := true
	for i := 0; i+8 <= len(elems); i += 8 {
		v := le64(elems[i:])
		if r.o.special(v) {
			continue
		}
		if first {
			b = append(b, `, "references":[`...)
			first = false
		} else {
			b = append(b, ", "...)
		}
		b = append(b, `"0x`...)
		b = strconv.AppendUint(b, v, 16)
		b = append(b, '"')
	}
	if !first {
		b = append(b, ']')
	}
	return b
}

// appendJSONString appends s as a JSON string: JSON's escapes, not Go's
// (strconv's \x and \v are not JSON), invalid UTF-8 replaced. A name
// read from a target may hold any bytes.
func appendJSONString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil {
		return append(b, `""`...)
	}
	return append(b, q...)
}

func appendBool(b []byte, key string, v bool) []byte {
	if !v {
		return b
	}
	b = append(b, `, "`...)
	b = append(b, key...)
	return append(b, `":true`...)
}
