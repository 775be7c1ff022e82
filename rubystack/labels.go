package rubystack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Request labels: key/value pairs a process keeps per fiber for outside
// readers (the ruby-profiler gem's state). A sampler copies each pair as it
// was at the sample: the key an ID, the value a VALUE, and of a heap object
// its first bytes and, for a String whose bytes live outside the object,
// their first bytes. Reading those copies, not the live object, a value is
// what the fiber had then even if it has been freed since.

// IDName returns the name of an ID (a Symbol's string).
func (r *Reader) IDName(id uint64) (string, error) { return r.syms.name(id) }

// ValueCopy is a VALUE with what a sampler copied of it.
type ValueCopy struct {
	Value uint64
	Obj   []byte // the object's first bytes (a heap object), else nil or zeros
	Ext   []byte // a String's bytes kept outside the object, as many as were copied
}

// maxLabelBytes bounds the text of a label value.
const maxLabelBytes = 256

// DescribeValue says what a copied value was, as a label reads: a String's
// text (cut, with "…", where the copy is shorter), an Integer's digits, a
// Symbol's name, nil, true or false, and for any other object its class
// ("#<Foo::Bar>", read from the live process: classes outlive requests).
func (r *Reader) DescribeValue(c ValueCopy) (string, error) {
	v, cs := c.Value, r.Layout.Constants
	switch {
	case v == uint64(cs["RUBY_Qnil"]):
		return "nil", nil
	case v == uint64(cs["RUBY_Qtrue"]):
		return "true", nil
	case v == uint64(cs["RUBY_Qfalse"]):
		return "false", nil
	case v&uint64(cs["RUBY_FIXNUM_FLAG"]) != 0 && cs["RUBY_FIXNUM_FLAG"] != 0:
		return strconv.FormatInt(int64(v)>>1, 10), nil
	}
	if flag, ok := cs["RUBY_SYMBOL_FLAG"]; ok {
		if shift, ok := cs["RUBY_SPECIAL_SHIFT"]; ok && v&(1<<shift-1) == uint64(flag) {
			return r.IDName(v >> shift) // a static Symbol
		}
	}
	if v&uint64(cs["RUBY_IMMEDIATE_MASK"]) != 0 {
		return "#<immediate>", nil // a Float or a Symbol this layout cannot read
	}
	if len(c.Obj) < 16 || binary.LittleEndian.Uint64(c.Obj) == 0 {
		return "", fmt.Errorf("%w: no copy of object %#x", errTorn, v)
	}
	flags := binary.LittleEndian.Uint64(c.Obj)
	o := r.o
	if flags&o.tMask == o.tString {
		// Read it as the live reader would, from the copies alone.
		mem := copiedMemory{{v, c.Obj}}
		if len(c.Ext) > 0 && flags&o.strNoEmbed != 0 && r.Layout.String.HeapPtr+8 <= int64(len(c.Obj)) {
			mem = append(mem, copiedWindow{binary.LittleEndian.Uint64(c.Obj[r.Layout.String.HeapPtr:]), c.Ext})
		}
		copied := *o
		copied.mem = mem
		s, full, err := copied.strN(v, maxCopied(mem, flags, o, r))
		if err != nil {
			return "", err
		}
		if len(s) > maxLabelBytes {
			s, full = s[:maxLabelBytes], false
		}
		if !full {
			s += "…"
		}
		return s, nil
	}
	if t := r.Layout.Symbol.Type; t >= 0 && flags&o.tMask == uint64(t) {
		// A dynamic Symbol: its name is its ID's (IDs are never freed).
		if at := r.Layout.Symbol.ID; at > 0 && at+8 <= int64(len(c.Obj)) {
			return r.IDName(binary.LittleEndian.Uint64(c.Obj[at:]))
		}
		return "", errors.New("a dynamic Symbol, and the layout does not say where it keeps its ID")
	}
	klass := binary.LittleEndian.Uint64(c.Obj[8:])
	name, err := r.classPath(klass)
	if err != nil {
		return "", err
	}
	return "#<" + name + ">", nil
}

// maxCopied is how many bytes of a String the copies hold.
func maxCopied(mem copiedMemory, flags uint64, o *objects, r *Reader) uint64 {
	if flags&o.strNoEmbed != 0 {
		if len(mem) > 1 {
			return uint64(len(mem[1].b))
		}
		return 0
	}
	at := uint64(r.Layout.String.EmbedBytes)
	if at >= uint64(len(mem[0].b)) {
		return 0
	}
	return uint64(len(mem[0].b)) - at
}

// copiedWindow is bytes copied from target memory at addr.
type copiedWindow struct {
	addr uint64
	b    []byte
}

// copiedMemory reads only what was copied.
type copiedMemory []copiedWindow

var errNotCopied = errors.New("not copied")

func (m copiedMemory) ReadAt(p []byte, addr uint64) error {
	for _, w := range m {
		if addr >= w.addr && addr-w.addr <= uint64(len(w.b)) && uint64(len(p)) <= uint64(len(w.b))-(addr-w.addr) {
			copy(p, w.b[addr-w.addr:])
			return nil
		}
	}
	return fmt.Errorf("%w: %d bytes at %#x", errNotCopied, len(p), addr)
}
