package rubystack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// Bounds on what is read from a target process for one object.
const (
	maxStringBytes = 4096    // labels, paths, class names: longer ones are cut (LimitStrings)
	maxArrayLen    = 1 << 24 // elements of an RArray we index into
	// idEntryUnit is ID_ENTRY_UNIT in symbol.c (a #define, so not in DWARF):
	// the global symbol table keeps IDs in chunks of 512 (Ruby 2.x to 4.0).
	idEntryUnit = 512
)

// errTorn marks a read that found something other than what it expected: a
// racing writer, a moved object, or memory that is not what it claims.
var errTorn = errors.New("inconsistent target memory")

// objects reads Ruby objects from a target's memory through a Layout.
type objects struct {
	mem Memory
	l   *rubybuild.Layout
	// maxString bounds the bytes read of a String (maxStringBytes unless
	// LimitStrings says less).
	maxString uint64
	// constants used on every read
	tMask, tString, tArray, tClass, tModule, tIClass, tIMemo uint64
	flUShift, qnil, qfalse, immMask                          uint64
	strNoEmbed, strEmbedLenMask, strEmbedLenShift            uint64
	aryEmbed, aryEmbedLenMask, aryEmbedLenShift              uint64
}

func newObjects(mem Memory, l *rubybuild.Layout) *objects {
	c := func(name string) uint64 { return uint64(l.Constants[name]) }
	return &objects{
		mem: mem, l: l, maxString: maxStringBytes,
		tMask: c("RUBY_T_MASK"), tString: c("RUBY_T_STRING"), tArray: c("RUBY_T_ARRAY"),
		tClass: c("RUBY_T_CLASS"), tModule: c("RUBY_T_MODULE"), tIClass: c("RUBY_T_ICLASS"),
		tIMemo: c("RUBY_T_IMEMO"), flUShift: c("RUBY_FL_USHIFT"),
		qnil: c("RUBY_Qnil"), qfalse: c("RUBY_Qfalse"), immMask: c("RUBY_IMMEDIATE_MASK"),
		strNoEmbed: c("RSTRING_NOEMBED"), strEmbedLenMask: c("RSTRING_EMBED_LEN_MASK"),
		strEmbedLenShift: c("RSTRING_EMBED_LEN_SHIFT"),
		aryEmbed:         c("RARRAY_EMBED_FLAG"), aryEmbedLenMask: c("RARRAY_EMBED_LEN_MASK"),
		aryEmbedLenShift: c("RARRAY_EMBED_LEN_SHIFT"),
	}
}

func (o *objects) word(addr uint64) (uint64, error) { return ReadWord(o.mem, addr) }

func (o *objects) u32(addr uint64) (uint32, error) {
	var b [4]byte
	if err := o.mem.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// special says whether v is an immediate or nil/false rather than a pointer
// (RB_SPECIAL_CONST_P).
func (o *objects) special(v uint64) bool {
	return v&o.immMask != 0 || v == o.qnil || v == o.qfalse
}

// flags reads RBasic.flags of a heap object.
func (o *objects) flags(v uint64) (uint64, error) {
	if o.special(v) {
		return 0, fmt.Errorf("%w: %#x is not a heap object", errTorn, v)
	}
	return o.word(v + uint64(o.l.Basic.Flags))
}

func (o *objects) typeOf(v uint64) (uint64, error) {
	f, err := o.flags(v)
	return f & o.tMask, err
}

// imemoType returns the imemo type of v, or an error when v is not an imemo.
func (o *objects) imemoType(v uint64) (int64, error) {
	f, err := o.flags(v)
	if err != nil {
		return 0, err
	}
	if f&o.tMask != o.tIMemo {
		return 0, fmt.Errorf("%w: %#x is not an imemo (type %#x)", errTorn, v, f&o.tMask)
	}
	return int64((f >> o.flUShift) & 0xf), nil // imemo_mask
}

// checkImemo refuses v unless it is an imemo of type kind (a Layout
// constant, imemo_iseq), what in errors (an iseq).
func (o *objects) checkImemo(v uint64, kind, what string) error {
	typ, err := o.imemoType(v)
	if err != nil {
		return err
	}
	if typ != o.l.Constants[kind] {
		return fmt.Errorf("%w: %#x is imemo type %d, not %s", errTorn, v, typ, what)
	}
	return nil
}

// str reads a String's bytes, at most o.maxString of them.
func (o *objects) str(v uint64) (string, error) {
	s, _, err := o.strN(v, o.maxString)
	return s, err
}

// strN reads a String's first max bytes at most, and says whether that was
// all of it.
func (o *objects) strN(v, max uint64) (string, bool, error) {
	f, err := o.flags(v)
	if err != nil {
		return "", false, err
	}
	if f&o.tMask != o.tString {
		return "", false, fmt.Errorf("%w: %#x is not a String (type %#x)", errTorn, v, f&o.tMask)
	}
	s := &o.l.String
	var n, ptr uint64
	switch {
	case f&o.strNoEmbed != 0:
		lenAt := s.HeapLen
		if o.l.Capabilities.StringLenField {
			lenAt = s.Len
		}
		if n, err = o.word(v + uint64(lenAt)); err != nil {
			return "", false, err
		}
		if ptr, err = o.word(v + uint64(s.HeapPtr)); err != nil {
			return "", false, err
		}
	case o.l.Capabilities.StringLenField:
		if n, err = o.word(v + uint64(s.Len)); err != nil {
			return "", false, err
		}
		ptr = v + uint64(s.EmbedBytes)
	case s.EmbedLen >= 0:
		if n, err = o.word(v + uint64(s.EmbedLen)); err != nil {
			return "", false, err
		}
		ptr = v + uint64(s.EmbedBytes)
	default: // ≤3.1: the length is in the flags
		n = (f & o.strEmbedLenMask) >> o.strEmbedLenShift
		ptr = v + uint64(s.EmbedBytes)
	}
	if int64(n) < 0 {
		return "", false, fmt.Errorf("%w: String %#x has length %d", errTorn, v, int64(n))
	}
	full := n <= max
	if !full {
		n = max
	}
	if n == 0 {
		return "", full, nil
	}
	b := make([]byte, n)
	if err := o.mem.ReadAt(b, ptr); err != nil {
		return "", false, err
	}
	return unsafe.String(&b[0], len(b)), full, nil // b is not written again
}

// arrayAt returns element i of an Array.
func (o *objects) arrayAt(v uint64, i uint64) (uint64, error) {
	f, err := o.flags(v)
	if err != nil {
		return 0, err
	}
	if f&o.tMask != o.tArray {
		return 0, fmt.Errorf("%w: %#x is not an Array (type %#x)", errTorn, v, f&o.tMask)
	}
	a := &o.l.Array
	var n, ptr uint64
	if f&o.aryEmbed != 0 {
		n = (f & o.aryEmbedLenMask) >> o.aryEmbedLenShift
		ptr = v + uint64(a.EmbedBytes)
	} else {
		if n, err = o.word(v + uint64(a.HeapLen)); err != nil {
			return 0, err
		}
		if ptr, err = o.word(v + uint64(a.HeapPtr)); err != nil {
			return 0, err
		}
	}
	if n > maxArrayLen {
		return 0, fmt.Errorf("%w: Array %#x has length %d", errTorn, v, n)
	}
	if i >= n {
		return 0, fmt.Errorf("%w: index %d of an Array of %d", errTorn, i, n)
	}
	return o.word(ptr + 8*i)
}

// idTable is the global symbol table: ID to name.
type idTable struct {
	o       *objects
	addr    uint64 // runtime address of ruby_global_symbols
	cache   map[uint64]string
	maxSize int
}

const maxIDCache = 1 << 16

// name returns the string of an ID, as rb_id2str does (≤4.0 layout).
func (t *idTable) name(id uint64) (string, error) {
	if s, ok := t.cache[id]; ok {
		return s, nil
	}
	if t.addr == 0 {
		return "", errors.New("the global symbol table was not found")
	}
	l := t.o.l
	serial := id
	if id > uint64(l.Constants["tLAST_OP_ID"]) {
		serial = id >> uint64(l.Constants["RUBY_ID_SCOPE_SHIFT"])
	}
	counterAt, exclusive := l.Symbols.LastID, false
	if l.Capabilities.SymbolsNextID {
		counterAt, exclusive = l.Symbols.NextID, true
	}
	counter, err := t.o.u32(t.addr + uint64(counterAt))
	if err != nil {
		return "", err
	}
	if serial == 0 || serial > uint64(counter) || exclusive && serial == uint64(counter) {
		return "", fmt.Errorf("%w: ID %#x (serial %d) is past the symbol table's %d", errTorn, id, serial, counter)
	}
	ids, err := t.o.word(t.addr + uint64(l.Symbols.IDs))
	if err != nil {
		return "", err
	}
	chunk, err := t.o.arrayAt(ids, serial/idEntryUnit)
	if err != nil {
		return "", err
	}
	entry := (serial%idEntryUnit)*uint64(l.Constants["ID_ENTRY_SIZE"]) + uint64(l.Constants["ID_ENTRY_STR"])
	sv, err := t.o.arrayAt(chunk, entry)
	if err != nil {
		return "", err
	}
	s, err := t.o.str(sv)
	if err != nil {
		return "", err
	}
	if len(t.cache) < maxIDCache { // IDs are never freed or moved: no validation needed
		t.cache[id] = s
	}
	return s, nil
}

// le64 decodes a little-endian word of target memory.
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
