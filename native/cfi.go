package native

import (
	"encoding/binary"
	"errors"
)

// The DWARF call frame instructions (DWARF 5, section 6.4.2; DW_CFA_* in
// dwarf.h), interpreted by fdeRows.
const (
	cfaAdvanceLoc        = 0x40 // high 2 bits; low 6: delta
	cfaOffset            = 0x80 // high 2 bits; low 6: register
	cfaRestore           = 0xc0 // high 2 bits; low 6: register
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUWindowSave     = 0x2d // AArch64: DW_CFA_AARCH64_negate_ra_state
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

var errCFI = errors.New("malformed call frame instructions")

// How the CFA is defined while interpreting.
type cfaDef uint8

const (
	cfaNotDefined   cfaDef = iota
	cfaByRegister          // cfaReg + cfaOffset
	cfaByPLT               // the PLT's expression
	cfaByExpression        // any other expression
)

// cfiState is the rule in force while interpreting: the CFA's definition,
// and the rules of the two registers a table keeps.
type cfiState struct {
	cfa       cfaDef
	cfaReg    uint64
	cfaOffset int64
	plt       uint8
	fp, ra    RegRule
	raUndef   bool // DW_CFA_undefined on the return address column
}

// fdeRows appends the rows of one FDE to rows: the CIE's initial
// instructions, then the FDE's, a row at each advance. On malformed
// instructions the rows found so far stand and the rest of the FDE is
// CFAUnsupported.
func fdeRows(arch Arch, f fdeRange, rows []Row) ([]Row, error) {
	if f.signal {
		if arch != ArchX86_64 {
			return append(rows, Row{Start: f.begin, CFA: CFAUnsupported}), nil
		}
		return append(rows, Row{Start: f.begin, CFA: CFASignal}), nil
	}
	if f.raColumn != arch.RA || f.codeAlign == 0 {
		return append(rows, Row{Start: f.begin, CFA: CFAUnsupported}), nil
	}
	var init cfiState
	if arch.RAInRegister {
		init.ra = RegRule{Kind: RegSame}
	} else {
		init.ra = RegRule{Kind: RegUnknown}
	}
	in := cfiInterp{arch: arch, f: f, loc: f.begin}
	if err := in.run(f.initial, &init, nil); err != nil {
		return append(rows, Row{Start: f.begin, CFA: CFAUnsupported}), nil
	}
	st := init
	in.rows = rows
	if err := in.run(f.instructions, &st, &init); err != nil {
		if in.loc < f.end {
			in.rows = append(in.rows, Row{Start: in.loc, CFA: CFAUnsupported})
		}
		return in.rows, nil
	}
	if in.loc < f.end {
		in.rows = append(in.rows, st.row(arch, in.loc))
	}
	if len(in.rows) > maxTableRows {
		return in.rows, errTooManyRows
	}
	return in.rows, nil
}

type cfiInterp struct {
	arch Arch
	f    fdeRange
	loc  uint64
	rows []Row
}

// row is the table row for state s at loc.
func (s *cfiState) row(arch Arch, loc uint64) Row {
	r := Row{Start: loc, FP: s.fp, RA: s.ra}
	switch {
	case s.raUndef:
		return Row{Start: loc, CFA: CFAOutermost}
	case s.cfa == cfaByPLT:
		r.CFA, r.PLTThreshold = CFAPLT, s.plt
	case s.cfa != cfaByRegister:
		return Row{Start: loc, CFA: CFAUnsupported}
	case s.cfaReg == arch.SP:
		r.CFA = CFAStackPointer
	case s.cfaReg == arch.FP:
		r.CFA = CFAFramePointer
	default:
		return Row{Start: loc, CFA: CFAUnsupported}
	}
	if s.cfaOffset != int64(int32(s.cfaOffset)) {
		return Row{Start: loc, CFA: CFAUnsupported}
	}
	r.CFAOffset = int32(s.cfaOffset)
	if r.RA.Kind == RegUnknown {
		return Row{Start: loc, CFA: CFAUnsupported}
	}
	return r
}

// run interprets code, starting from st; initial is the CIE's state (for
// DW_CFA_restore), nil while running the CIE's own instructions (which emit
// no rows).
func (in *cfiInterp) run(code []byte, st *cfiState, initial *cfiState) error {
	var remembered [maxRememberDep]cfiState
	depth := 0
	d := cfiReader{b: code}
	for ops := 0; d.more(); ops++ {
		if ops >= maxFDEOps {
			return errCFI
		}
		op := d.u8()
		var reg uint64
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if !in.advance(uint64(op&0x3f), st, initial) {
				return nil
			}
			continue
		case cfaOffset:
			in.setReg(st, uint64(op&0x3f), RegRule{Kind: RegAtCFA}, int64(d.uleb())*in.f.dataAlign)
			continue
		case cfaRestore:
			in.restore(st, initial, uint64(op&0x3f))
			continue
		}
		switch op {
		case cfaNop, cfaGNUWindowSave:
		case cfaSetLoc:
			return errCFI // absolute locations: not emitted for .eh_frame by toolchains
		case cfaAdvanceLoc1:
			if !in.advance(uint64(d.u8()), st, initial) {
				return nil
			}
		case cfaAdvanceLoc2:
			if !in.advance(uint64(d.u16()), st, initial) {
				return nil
			}
		case cfaAdvanceLoc4:
			if !in.advance(uint64(d.u32()), st, initial) {
				return nil
			}
		case cfaOffsetExtended:
			reg = d.uleb()
			in.setReg(st, reg, RegRule{Kind: RegAtCFA}, int64(d.uleb())*in.f.dataAlign)
		case cfaOffsetExtendedSF:
			reg = d.uleb()
			in.setReg(st, reg, RegRule{Kind: RegAtCFA}, d.sleb()*in.f.dataAlign)
		case cfaGNUNegOffsetExtSF:
			reg = d.uleb()
			in.setReg(st, reg, RegRule{Kind: RegAtCFA}, -int64(d.uleb())*in.f.dataAlign)
		case cfaRestoreExtended:
			in.restore(st, initial, d.uleb())
		case cfaUndefined:
			reg = d.uleb()
			in.setReg(st, reg, RegRule{Kind: RegUnknown}, 0)
			if reg == in.arch.RA {
				st.raUndef = true
			}
		case cfaSameValue:
			in.setReg(st, d.uleb(), RegRule{Kind: RegSame}, 0)
		case cfaRegister:
			reg = d.uleb()
			other := d.uleb()
			if reg == other {
				in.setReg(st, reg, RegRule{Kind: RegSame}, 0)
			} else {
				in.setReg(st, reg, RegRule{Kind: RegUnknown}, 0)
			}
		case cfaExpression, cfaValExpression:
			reg = d.uleb()
			d.block()
			in.setReg(st, reg, RegRule{Kind: RegUnknown}, 0)
		case cfaValOffset:
			reg = d.uleb()
			d.uleb()
			in.setReg(st, reg, RegRule{Kind: RegUnknown}, 0)
		case cfaValOffsetSF:
			reg = d.uleb()
			d.sleb()
			in.setReg(st, reg, RegRule{Kind: RegUnknown}, 0)
		case cfaRememberState:
			if depth >= maxRememberDep {
				return errCFI
			}
			remembered[depth] = *st
			depth++
		case cfaRestoreState:
			if depth == 0 {
				return errCFI
			}
			depth--
			// The CFA and the registers come back; the location does not.
			*st = remembered[depth]
		case cfaDefCFA:
			st.cfaReg, st.cfaOffset, st.cfa = d.uleb(), int64(d.uleb()), cfaByRegister
		case cfaDefCFASF:
			st.cfaReg, st.cfaOffset, st.cfa = d.uleb(), d.sleb()*in.f.dataAlign, cfaByRegister
		case cfaDefCFARegister:
			// (After an expression the offset is not defined: DWARF 5
			// allows this only for a register rule.)
			st.cfaReg = d.uleb()
			if st.cfa != cfaByRegister {
				st.cfa = cfaByExpression
			}
		case cfaDefCFAOffset, cfaDefCFAOffsetSF:
			if op == cfaDefCFAOffset {
				st.cfaOffset = int64(d.uleb())
			} else {
				st.cfaOffset = d.sleb() * in.f.dataAlign
			}
			if st.cfa != cfaByRegister {
				st.cfa = cfaByExpression
			}
		case cfaDefCFAExpression:
			st.cfa = cfaByExpression
			if off, threshold, ok := pltExpression(d.block()); ok && in.arch == ArchX86_64 {
				st.cfa, st.cfaOffset, st.plt = cfaByPLT, off, threshold
			}
		case cfaGNUArgsSize:
			d.uleb()
		default:
			return errCFI
		}
		if d.bad {
			return errCFI
		}
	}
	if d.bad {
		return errCFI
	}
	return nil
}

// advance emits the row in force before moving loc on by delta code units;
// false once loc has passed the FDE's end (the rest cannot apply).
func (in *cfiInterp) advance(delta uint64, st *cfiState, initial *cfiState) bool {
	if initial == nil { // a CIE's instructions do not advance
		return true
	}
	if delta == 0 {
		return true
	}
	in.rows = append(in.rows, st.row(in.arch, in.loc))
	step := delta * in.f.codeAlign
	if step/in.f.codeAlign != delta || in.loc+step < in.loc || in.loc+step >= in.f.end {
		in.loc = in.f.end
		return false
	}
	in.loc += step
	return true
}

// setReg applies a rule to reg, when it is one the table keeps.
func (in *cfiInterp) setReg(st *cfiState, reg uint64, rule RegRule, offset int64) {
	if rule.Kind == RegAtCFA {
		if offset != int64(int32(offset)) {
			rule = RegRule{Kind: RegUnknown}
		} else {
			rule.Offset = int32(offset)
		}
	}
	switch reg {
	case in.arch.FP:
		st.fp = rule
	case in.arch.RA:
		st.ra, st.raUndef = rule, false
	}
}

// restore puts reg's rule back to the CIE's.
func (in *cfiInterp) restore(st *cfiState, initial *cfiState, reg uint64) {
	if initial == nil {
		return
	}
	switch reg {
	case in.arch.FP:
		st.fp = initial.fp
	case in.arch.RA:
		st.ra, st.raUndef = initial.ra, initial.raUndef
	}
}

// pltExpression recognises the x86_64 PLT's CFA expression:
// DW_OP_breg7 (rsp) off; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
// DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus.
func pltExpression(e []byte) (offset int64, threshold uint8, ok bool) {
	d := cfiReader{b: e}
	if d.u8() != 0x77 { // DW_OP_breg7
		return 0, 0, false
	}
	offset = d.sleb()
	if d.u8() != 0x80 || d.sleb() != 0 { // DW_OP_breg16 0
		return 0, 0, false
	}
	if d.u8() != 0x3f || d.u8() != 0x1a { // DW_OP_lit15, DW_OP_and
		return 0, 0, false
	}
	lit := d.u8()
	if lit < 0x30 || lit > 0x3f { // DW_OP_lit0..15
		return 0, 0, false
	}
	if d.u8() != 0x2a || d.u8() != 0x33 || d.u8() != 0x24 || d.u8() != 0x22 { // ge, lit3, shl, plus
		return 0, 0, false
	}
	if d.bad || d.more() || offset != int64(int32(offset)) {
		return 0, 0, false
	}
	return offset, lit - 0x30, true
}

// cfiReader reads call frame instructions; a read past the end sets bad
// and returns zeros.
type cfiReader struct {
	b   []byte
	bad bool
}

func (d *cfiReader) more() bool { return len(d.b) > 0 && !d.bad }

func (d *cfiReader) take(n int) []byte {
	if len(d.b) < n {
		d.bad, d.b = true, nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *cfiReader) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *cfiReader) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *cfiReader) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *cfiReader) uleb() uint64 {
	v, n := uleb128(d.b)
	if n == 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *cfiReader) sleb() int64 {
	v, n := sleb128(d.b)
	if n == 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *cfiReader) block() []byte {
	n := d.uleb()
	if n > uint64(len(d.b)) {
		d.bad, d.b = true, nil
		return nil
	}
	return d.take(int(n))
}
