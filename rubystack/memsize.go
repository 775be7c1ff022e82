package rubystack

import (
	"encoding/binary"
	"fmt"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// maxOffSlot bounds the bytes one object is said to own beyond its slot: a
// capacity is read from the target, so a torn one must not add up to
// nonsense (no Ruby buffer is a TiB).
const maxOffSlot = 1 << 40

// memsizer says what ObjectSpace.memsize_of counts for an object beyond
// its slot, where the layout tells how: a string's own buffer
// (rb_str_memsize: its capacity and terminator, unless the buffer is
// shared or not the string's to free) and an array's (rb_ary_memsize: its
// capacity in elements, unless embedded or shared; a shared root's
// capacity field counts its sharers instead, and its length is counted).
// A hash's table (st_memsize of its st_table: the table, its bins and its
// entries, less the table itself where it lies in the slot, from 3.3; or
// the size of its ar_table where that is a separate allocation, up to
// 3.2). An object's instance variables when they do not fit its slot (as
// many as it has, up to 3.1; as many as its shape has room for, or the
// st_table of a shape too complex, since). Other types count their slot
// alone: a class's tables and C data are not followed, nor the instance
// variables of a non-object kept outside it (FL_EXIVAR).
type memsizer struct {
	mem                              Memory // where a hash's st_table is read, up to 3.2
	buf                              []byte
	tMask, tString, tArray, tHash    uint64
	strNoEmbed, strShared, strNoFree uint64
	aryEmbed, aryShared, aryRoot     uint64
	strCapa, aryCapa, aryLen         int64 // offsets in the slot, -1 absent
	encShift, encMax                 uint64
	termLen                          [128]uint8 // by encoding index: the terminator's bytes beyond 1
	hashST                           uint64     // RHASH_ST_TABLE_FLAG
	hashSt, hashAr, hashSize         int64      // RHash as.st, as.ar (≤3.2), sizeof(struct RHash)
	arSize, stSize, stBins           int64
	entryPower, binPower, sizeInd    int64
	entrySize                        int64
	tObject, objEmbed, objHeap       uint64
	numIV, ivs                       int64
	// shape says what an object's shape id gives its instance variables:
	// room for capa of them, or a hash table (too complex); nil where the
	// layout has no shapes.
	shape      func(id uint64) (capa uint64, tooComplex bool, err error)
	shapeBits  uint64 // the shape id's width, in the flags' high bits
	shapeFlags uint64 // SHAPE_ID_FLAGS_MASK (4.0+), 0 before
	tooComplex uint64 // SHAPE_ID_FL_TOO_COMPLEX (4.0+), 0 before
	// tables are the st_tables outside the slots of one page, read at
	// once before its slots are counted (prefetch), by address.
	tables     map[uint64][]byte
	tableBuf   []byte
	pieces     [][]byte
	pieceAddrs []uint64
	pieceOK    []bool
}

func newMemsizer(l *rubybuild.Layout, mem Memory) memsizer {
	c := func(name string) uint64 { return uint64(l.Constants[name]) }
	st := &l.StTable
	m := memsizer{
		mem: mem, buf: make([]byte, max(st.Size, 0)),
		tMask: c("RUBY_T_MASK"), tString: c("RUBY_T_STRING"), tArray: c("RUBY_T_ARRAY"), tHash: c("RUBY_T_HASH"),
		hashST: c("RHASH_ST_TABLE_FLAG"), hashSt: l.Hash.St, hashAr: l.Hash.Ar, hashSize: l.Hash.Size,
		arSize: l.Hash.ArSize, stSize: st.Size, stBins: st.Bins, entryPower: st.EntryPower, binPower: st.BinPower,
		sizeInd: st.SizeInd, entrySize: st.EntrySize,
		tObject: c("RUBY_T_OBJECT"), objEmbed: c("ROBJECT_EMBED"), objHeap: c("ROBJECT_HEAP"),
		numIV: l.Object.NumIV, ivs: l.Object.IVs,
		shapeFlags: c("SHAPE_ID_FLAGS_MASK"), tooComplex: c("SHAPE_ID_FL_TOO_COMPLEX"),
		strNoEmbed: c("RSTRING_NOEMBED"), strShared: c("RUBY_ELTS_SHARED"), strNoFree: c("RUBY_FL_USER18"),
		aryEmbed: c("RARRAY_EMBED_FLAG"), aryShared: c("RUBY_ELTS_SHARED"),
		aryRoot: c("RUBYPERF_RARRAY_SHARED_ROOT_FLAG"),
		strCapa: l.String.Capa, aryCapa: l.Array.Capa, aryLen: l.Array.HeapLen,
		encShift: c("RUBY_ENCODING_SHIFT"), encMax: c("RUBY_ENCODING_INLINE_MAX"),
	}
	if m.strNoEmbed == 0 || m.strShared == 0 || m.strNoFree == 0 || m.aryEmbed == 0 {
		m.strCapa, m.aryCapa = -1, -1 // flags unknown: count slots alone
	}
	if m.hashST == 0 || m.hashSize < 0 || m.stSize <= 0 || m.stBins < 0 || m.entryPower < 0 || m.binPower < 0 ||
		m.sizeInd < 0 || m.entrySize <= 0 || m.stBins+8 > m.stSize || max(m.entryPower, m.binPower, m.sizeInd) >= m.stSize ||
		m.hashSt < 0 != (m.hashAr < 0) || m.hashAr >= 0 && m.arSize <= 0 {
		m.hashSize = -1 // hashes count their slots alone
	}
	if m.encMax == 0 || m.encMax > 127 || m.encShift == 0 || m.encShift > 56 {
		m.encMax = 0
	}
	// A string's terminator is its encoding's shortest character: 2 bytes
	// for UTF-16, 4 for UTF-32, 1 for the rest (TERM_LEN).
	for name, n := range map[string]uint8{
		"RUBY_ENCINDEX_UTF_16BE": 2, "RUBY_ENCINDEX_UTF_16LE": 2, "RUBY_ENCINDEX_UTF_16": 2,
		"RUBY_ENCINDEX_UTF_32BE": 4, "RUBY_ENCINDEX_UTF_32LE": 4, "RUBY_ENCINDEX_UTF_32": 4,
	} {
		if i, ok := l.Constants[name]; ok && i > 0 && i < 128 {
			m.termLen[i] = n - 1
		}
	}
	return m
}

// offSlot is what an object of type typ with these flags, whose slot holds
// slot, owns beyond it; ok is false where the layout does not tell.
func (m *memsizer) offSlot(typ, flags uint64, slot []byte) (n uint64, ok bool) {
	switch typ {
	case m.tString:
		if m.strCapa < 0 {
			return 0, false
		}
		if flags&(m.strNoEmbed|m.strShared|m.strNoFree) != m.strNoEmbed {
			return 0, true
		}
		capa, ok := slotWord(slot, m.strCapa)
		if !ok {
			return 0, false
		}
		term := uint64(1)
		if m.encMax != 0 {
			if i := flags >> m.encShift & m.encMax; i < m.encMax {
				term += uint64(m.termLen[i])
			}
		}
		return min(capa, maxOffSlot) + term, true
	case m.tArray:
		if m.aryCapa < 0 {
			return 0, false
		}
		if flags&(m.aryEmbed|m.aryShared) != 0 {
			return 0, true
		}
		capa, ok1 := slotWord(slot, m.aryCapa)
		n, ok2 := slotWord(slot, m.aryLen)
		if !ok1 || !ok2 {
			return 0, false
		}
		if m.aryRoot != 0 && flags&m.aryRoot != 0 {
			capa = n // a shared root: its capacity field counts its sharers
		}
		// Where the root flag is unknown (a release without a table), a
		// root whose sharers outnumber its elements is counted too much.
		return min(max(capa, n), maxOffSlot/8) * 8, true
	case m.tHash:
		return m.hashTable(flags, slot)
	case m.tObject:
		return m.objectFields(flags, slot)
	}
	return 0, false
}

// objectFields is what an object's instance variables take beyond its
// slot.
func (m *memsizer) objectFields(flags uint64, slot []byte) (uint64, bool) {
	if m.numIV >= 0 { // ≤3.1: a count beside the array
		if m.objEmbed == 0 || m.numIV+4 > int64(len(slot)) {
			return 0, false
		}
		if flags&m.objEmbed != 0 {
			return 0, true
		}
		return uint64(binary.LittleEndian.Uint32(slot[m.numIV:])) * 8, true
	}
	capa, tooComplex, outside, ok := m.objectShape(flags)
	switch {
	case !ok:
		return 0, false
	case !outside:
		return 0, true
	case !tooComplex:
		return min(capa, maxOffSlot/8) * 8, true
	}
	p, ok := slotWord(slot, m.ivs)
	if !ok || p == 0 {
		return 0, false
	}
	return m.stTable(p, true)
}

// objectShape is what an object's shape (3.2+) says of its instance
// variables: room for capa of them, or (tooComplex) an st_table at
// as.heap.ivptr; outside: they are not in its slot. A too complex object
// keeps ROBJECT_EMBED in 3.2-3.4 (which check its shape first); 4.0
// counts either only under ROBJECT_HEAP, with the too-complex bit in the
// shape id.
func (m *memsizer) objectShape(flags uint64) (capa uint64, tooComplex, outside, ok bool) {
	switch {
	case m.objHeap == 0 && m.objEmbed == 0 || m.shape == nil || m.shapeBits == 0:
		return 0, false, false, false
	case m.objHeap != 0 && flags&m.objHeap == 0:
		return 0, false, false, true
	}
	id := flags >> (64 - m.shapeBits)
	tooComplex = m.tooComplex != 0 && id&m.tooComplex != 0
	if !tooComplex {
		var err error
		if capa, tooComplex, err = m.shape(id &^ m.shapeFlags); err != nil {
			return 0, false, false, false
		}
	}
	outside = tooComplex || m.objHeap != 0 || flags&m.objEmbed == 0
	return capa, tooComplex, outside, true
}

// stTable is st_memsize of the st_table at p, read from the target
// (withTable: the table itself counted too), or found read by prefetch.
func (m *memsizer) stTable(p uint64, withTable bool) (uint64, bool) {
	st, ok := m.tables[p]
	if !ok {
		if m.mem == nil || len(m.buf) == 0 || m.mem.ReadAt(m.buf, p) != nil {
			return 0, false
		}
		st = m.buf
	}
	n, ok := m.stEntries(st)
	if withTable {
		n += uint64(m.stSize)
	}
	return n, ok
}

// prefetch reads, in as few system calls as it can, every st_table outside
// the slots of one page (body, slots of size bytes) that offSlot would
// read one by one: the tables of hashes (up to 3.2) and of too complex
// objects.
func (m *memsizer) prefetch(body []byte, size uint64) {
	clear(m.tables)
	if m.mem == nil || m.stSize <= 0 || size == 0 {
		return
	}
	m.pieceAddrs = m.pieceAddrs[:0]
	for off := uint64(0); off+size <= uint64(len(body)); off += size {
		slot := body[off : off+size]
		flags := le64(slot)
		if p, ok := m.tableOutside(flags, slot); ok && p != 0 {
			m.pieceAddrs = append(m.pieceAddrs, p)
		}
	}
	n := len(m.pieceAddrs)
	if n == 0 {
		return
	}
	if len(m.tableBuf) < n*int(m.stSize) {
		m.tableBuf = make([]byte, n*int(m.stSize))
	}
	m.pieces, m.pieceOK = m.pieces[:0], append(m.pieceOK[:0], make([]bool, n)...)
	for i := range n {
		m.pieces = append(m.pieces, m.tableBuf[i*int(m.stSize):(i+1)*int(m.stSize)])
	}
	readPieces(m.mem, m.pieces, m.pieceAddrs, m.pieceOK)
	if m.tables == nil {
		m.tables = map[uint64][]byte{}
	}
	for i, p := range m.pieceAddrs {
		if m.pieceOK[i] {
			m.tables[p] = m.pieces[i]
		}
	}
}

// tableOutside is the address of the st_table outside its slot that an
// object's memsize counts, if it has one.
func (m *memsizer) tableOutside(flags uint64, slot []byte) (uint64, bool) {
	switch typ := flags & m.tMask; {
	case typ == m.tHash && m.hashSize >= 0 && m.hashSt >= 0 && flags&m.hashST != 0:
		return slotWord(slot, m.hashSt)
	case typ == m.tObject && m.numIV < 0:
		if _, tooComplex, _, ok := m.objectShape(flags); ok && tooComplex {
			return slotWord(slot, m.ivs)
		}
	}
	return 0, false
}

// slotWord is the word at off in slot, if the slot has it.
func slotWord(slot []byte, off int64) (uint64, bool) {
	if off < 0 || off+8 > int64(len(slot)) {
		return 0, false
	}
	return le64(slot[off:]), true
}

// stEntries is what an st_table, read as st, takes beyond itself: its
// entries and its bins.
func (m *memsizer) stEntries(st []byte) (uint64, bool) {
	if int64(len(st)) < m.stSize || m.stBins < 0 {
		return 0, false
	}
	ep, bins := uint64(st[m.entryPower]), le64(st[m.stBins:])
	binBits := uint64(st[m.binPower]) + uint64(st[m.sizeInd])
	if ep > 40 || binBits > 43 {
		return 0, false // torn: no table is that large
	}
	n := (uint64(1) << ep) * uint64(m.entrySize)
	if bins != 0 {
		n += (uint64(1) << binBits) / 8 * 8
	}
	return n, true
}

// hashTable is what a hash's table takes beyond its slot.
func (m *memsizer) hashTable(flags uint64, slot []byte) (uint64, bool) {
	if m.hashSize < 0 {
		return 0, false
	}
	if flags&m.hashST == 0 { // an ar_table
		if m.hashAr < 0 {
			return 0, true // in the slot
		}
		p, ok := slotWord(slot, m.hashAr)
		if !ok {
			return 0, false
		}
		if p == 0 {
			return 0, true // none yet
		}
		return uint64(m.arSize), true
	}
	if m.hashSt < 0 { // the st_table follows the RHash in the slot
		if m.hashSize+m.stSize > int64(len(slot)) {
			return 0, false
		}
		return m.stEntries(slot[m.hashSize : m.hashSize+m.stSize])
	}
	p, ok := slotWord(slot, m.hashSt)
	if !ok || p == 0 {
		return 0, false
	}
	return m.stTable(p, true)
}

// maxShapesKnown bounds the shapes a memsizer remembers.
const maxShapesKnown = 1 << 16

// memsizer is a memsizer for r's process, reading object shapes through r
// (remembered by id: objects share few shapes).
func (r *Reader) memsizer() memsizer {
	m := newMemsizer(r.Layout, r.direct.mem)
	s := &r.Layout.Shape
	if s.Size <= 0 || s.Capacity.Offset < 0 || s.Capacity.Offset+s.Capacity.Size > s.Size || s.Type < 0 ||
		s.Type >= s.Size || s.ParentIDSize <= 0 || s.ParentIDSize > 4 {
		return m
	}
	type facts struct {
		capa       uint64
		tooComplex bool
	}
	known := map[uint64]facts{}
	var lastID uint64 // the shape asked for last, and what it says:
	var last facts    // objects in a row often share one
	haveLast := false
	tooComplex, hasTooComplex := r.Layout.Constants["SHAPE_OBJ_TOO_COMPLEX"]
	buf := make([]byte, s.Size)
	var list uint64
	m.shapeBits = uint64(8 * s.ParentIDSize)
	m.shape = func(id uint64) (uint64, bool, error) {
		if haveLast && id == lastID {
			return last.capa, last.tooComplex, nil
		}
		if f, ok := known[id]; ok {
			lastID, last, haveLast = id, f, true
			return f.capa, f.tooComplex, nil
		}
		if list == 0 {
			var err error
			if list, err = r.shapeList(); err != nil || list == 0 {
				return 0, false, fmt.Errorf("%w: no shape list", errTorn)
			}
		}
		if err := r.direct.mem.ReadAt(buf, list+id*uint64(s.Size)); err != nil {
			return 0, false, err
		}
		var f facts
		f.tooComplex = hasTooComplex && int64(buf[s.Type]) == tooComplex
		if c := s.Capacity; c.Size == 2 {
			f.capa = uint64(binary.LittleEndian.Uint16(buf[c.Offset:]))
		} else {
			f.capa = uint64(binary.LittleEndian.Uint32(buf[c.Offset:]))
		}
		if len(known) < maxShapesKnown {
			known[id] = f
		}
		lastID, last, haveLast = id, f, true
		return f.capa, f.tooComplex, nil
	}
	return m
}
