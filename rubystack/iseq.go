package rubystack

import (
	"fmt"
	"math/bits"
)

// iseq is what the symbolizer knows of one instruction sequence.
type iseq struct {
	addr, body          uint64
	typ                 int64
	label, baseLabel    string
	baseLabelValue      uint64 // the VALUE, for rb_profile_frame_full_label's identity test
	path                string
	hasPath             bool
	firstLineno         int64
	encoded             uint64 // iseq_encoded
	size                uint64 // iseq_size, in VALUEs
	insnsInfo, insnsLen uint64
	succTable           uint64
	positions           uint64
	local               uint64 // local_iseq
}

// Bounds for line tables read from a target.
const (
	maxIseqSize      = 1 << 24 // instructions in one iseq
	maxInsnsInfoSize = 1 << 20 // line-table entries (otel uses the same bound)
)

// succinct bit vector constants of iseq.c: 7-bit ranks in the immediate
// part, 9-bit ranks of 64-bit small blocks inside 512-bit blocks.
const (
	immRankBits   = 7
	immPerWord    = 9
	smallRankBits = 9
	blockBits     = 512
)

func (r *Reader) iseq(addr uint64) (*iseq, error) {
	if err := r.o.checkImemo(addr, "imemo_iseq", "an iseq"); err != nil {
		return nil, err
	}
	body, err := r.o.word(addr + uint64(r.Layout.Iseq.Body))
	if err != nil {
		return nil, err
	}
	if c, ok := r.iseqs[addr]; ok && c.body == body {
		return c, nil // GC compaction would have changed the object at addr
	}
	is, err := r.readIseq(addr, body)
	if err != nil {
		return nil, err
	}
	r.remember(r.iseqs, addr, is)
	return is, nil
}

func (r *Reader) readIseq(addr, body uint64) (*iseq, error) {
	b := &r.Layout.IseqBody
	w := func(off int64) (uint64, error) { return r.o.word(body + uint64(off)) }
	is := &iseq{addr: addr, body: body}
	typ, err := r.o.u32(body + uint64(b.Type))
	if err != nil {
		return nil, err
	}
	is.typ = int64(typ)
	size, err := r.o.u32(body + uint64(b.IseqSize))
	if err != nil {
		return nil, err
	}
	is.size = uint64(size)
	for _, f := range []struct {
		dst *uint64
		off int64
	}{
		{&is.encoded, b.IseqEncoded}, {&is.insnsInfo, b.InsnsInfoBody}, {&is.succTable, b.SuccIndexTable},
		{&is.local, b.LocalIseq}, {&is.baseLabelValue, b.BaseLabel},
	} {
		if *f.dst, err = w(f.off); err != nil {
			return nil, err
		}
	}
	if b.InsnsInfoPositions >= 0 {
		if is.positions, err = w(b.InsnsInfoPositions); err != nil {
			return nil, err
		}
	}
	n, err := r.o.u32(body + uint64(b.InsnsInfoSize))
	if err != nil {
		return nil, err
	}
	is.insnsLen = uint64(n)
	if is.size > maxIseqSize || is.insnsLen > maxInsnsInfoSize {
		return nil, fmt.Errorf("%w: iseq %#x claims %d instructions, %d line entries", errTorn, addr, is.size, is.insnsLen)
	}
	labelV, err := w(b.Label)
	if err != nil {
		return nil, err
	}
	if is.label, err = r.o.str(labelV); err != nil {
		return nil, fmt.Errorf("iseq %#x label: %w", addr, err)
	}
	if is.baseLabel, err = r.o.str(is.baseLabelValue); err != nil {
		return nil, fmt.Errorf("iseq %#x base_label: %w", addr, err)
	}
	// pathobj: a String, or an Array [path, realpath] (rb_iseq_path).
	pathobj, err := w(b.Path)
	if err != nil {
		return nil, err
	}
	if t, err := r.o.typeOf(pathobj); err == nil && t == r.o.tArray {
		if pathobj, err = r.o.arrayAt(pathobj, 0); err != nil {
			return nil, err
		}
	}
	if is.path, err = r.o.str(pathobj); err != nil {
		return nil, fmt.Errorf("iseq %#x path: %w", addr, err)
	}
	is.hasPath = true
	fl, err := w(b.FirstLineno)
	if err != nil {
		return nil, err
	}
	if r.Layout.Capabilities.FirstLinenoFixnum {
		is.firstLineno = int64(fl) >> 1 // FIX2INT
	} else {
		is.firstLineno = int64(int32(uint32(fl)))
	}
	return is, nil
}

// line returns the source line of pc in is, as calc_lineno does.
func (r *Reader) line(is *iseq, pc uint64) (int64, error) {
	if pc == 0 {
		if is.typ == r.Layout.Constants["ISEQ_TYPE_TOP"] {
			return 0, nil
		}
		return is.firstLineno, nil
	}
	if pc < is.encoded || (pc-is.encoded)/8 > is.size || (pc-is.encoded)%8 != 0 {
		return 0, fmt.Errorf("%w: pc %#x outside iseq %#x", errTorn, pc, is.addr)
	}
	pos := (pc - is.encoded) / 8
	if pos > 0 {
		pos-- // the pc points at the next instruction
	}
	var idx uint64
	switch {
	case is.insnsLen == 0:
		return 0, nil
	case is.insnsLen == 1:
		idx = 0
	case is.succTable != 0:
		rank, err := r.succIndexLookup(is.succTable, pos)
		if err != nil {
			return 0, err
		}
		if rank == 0 || rank > is.insnsLen {
			return 0, fmt.Errorf("%w: line-table rank %d of %d", errTorn, rank, is.insnsLen)
		}
		idx = rank - 1
	default:
		return 0, fmt.Errorf("%w: iseq %#x has no line index", errTorn, is.addr)
	}
	e := &r.Layout.InsnInfoEntry
	ln, err := r.o.u32(is.insnsInfo + idx*uint64(e.Size) + uint64(e.LineNo))
	return int64(int32(ln)), err
}

// succIndexLookup is iseq.c's succ_index_lookup over target memory.
func (r *Reader) succIndexLookup(table, x uint64) (uint64, error) {
	t := &r.Layout.SuccIndexTable
	immWords := uint64(t.SuccPart-t.ImmPart) / 8 // imm_part[IMMEDIATE_TABLE_SIZE / 9]
	immSize := immWords * immPerWord
	if x < immSize {
		v, err := r.o.word(table + uint64(t.ImmPart) + 8*(x/immPerWord))
		return (v >> (immRankBits * (x % immPerWord))) & (1<<immRankBits - 1), err
	}
	x -= immSize
	block := table + uint64(t.SuccPart) + (x/blockBits)*uint64(t.BlockSize)
	bit := x % blockBits
	small := bit / 64
	rank, err := r.o.u32(block + uint64(t.BlockRank))
	if err != nil {
		return 0, err
	}
	var smallRank uint64
	if small > 0 {
		v, err := r.o.word(block + uint64(t.BlockSmallRanks))
		if err != nil {
			return 0, err
		}
		smallRank = (v >> (smallRankBits * (small - 1))) & (1<<smallRankBits - 1)
	}
	w, err := r.o.word(block + uint64(t.BlockBits) + 8*small)
	if err != nil {
		return 0, err
	}
	return uint64(rank) + smallRank + uint64(bits.OnesCount64(w<<(63-bit%64))), nil
}
