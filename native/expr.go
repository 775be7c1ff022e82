package native

import "errors"

// maxExprOps bounds a DWARF expression's length.
const maxExprOps = 64

var errExpr = errors.New("unsupported DWARF expression")

// evalCFAExpression evaluates a DW_CFA_def_cfa_expression with the
// operations compilers and linkers emit for CFA rules: register-relative
// values, literals and arithmetic. The x86_64 PLT's rule is one:
// rsp + 8 + ((rip & 15) >= 11) << 3 (DWARF 5, section 2.5).
func evalCFAExpression(expr []byte, regs *[dwarfMax]uint64, known *[dwarfMax]bool) (uint64, error) {
	var st []int64
	pop := func() (int64, bool) {
		if len(st) == 0 {
			return 0, false
		}
		v := st[len(st)-1]
		st = st[:len(st)-1]
		return v, true
	}
	for i, n := 0, 0; i < len(expr); n++ {
		if n >= maxExprOps || len(st) > maxExprOps {
			return 0, errExpr
		}
		op := expr[i]
		i++
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0..31
			st = append(st, int64(op-0x30))
		case op >= 0x70 && op <= 0x8f: // DW_OP_breg0..31 SLEB128
			reg := int(op - 0x70)
			off, k := sleb128(expr[i:])
			if k == 0 || reg >= dwarfMax || !known[reg] {
				return 0, errExpr
			}
			i += k
			st = append(st, int64(regs[reg])+off)
		case op == 0x23: // DW_OP_plus_uconst ULEB128
			v, k := uleb128(expr[i:])
			a, ok := pop()
			if k == 0 || !ok {
				return 0, errExpr
			}
			i += k
			st = append(st, a+int64(v))
		case op == 0x08: // DW_OP_const1u
			if i >= len(expr) {
				return 0, errExpr
			}
			st = append(st, int64(expr[i]))
			i++
		case op == 0x1a || op == 0x22 || op == 0x1c || op == 0x24 || op == 0x25 || op == 0x2a || op == 0x21 ||
			op == 0x29 || op == 0x2d || op == 0x2c || op == 0x2b || op == 0x2e || op == 0x1e:
			b, ok1 := pop()
			a, ok2 := pop()
			if !ok1 || !ok2 {
				return 0, errExpr
			}
			var v int64
			switch op {
			case 0x1a: // and
				v = a & b
			case 0x22: // plus
				v = a + b
			case 0x1c: // minus
				v = a - b
			case 0x1e: // mul
				v = a * b
			case 0x21: // or
				v = a | b
			case 0x24: // shl
				v = a << uint64(b&63)
			case 0x25: // shr
				v = int64(uint64(a) >> uint64(b&63))
			case 0x2a: // ge
				v = b2i(a >= b)
			case 0x29: // eq
				v = b2i(a == b)
			case 0x2d: // lt
				v = b2i(a < b)
			case 0x2c: // le
				v = b2i(a <= b)
			case 0x2b: // gt
				v = b2i(a > b)
			case 0x2e: // ne
				v = b2i(a != b)
			}
			st = append(st, v)
		default:
			return 0, errExpr
		}
	}
	v, ok := pop()
	if !ok {
		return 0, errExpr
	}
	return uint64(v), nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func uleb128(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}

func sleb128(b []byte) (int64, int) {
	var v int64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= int64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if shift := 7 * (i + 1); shift < 64 && b[i]&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1
		}
	}
	return 0, 0
}
