package rubybuild

import "golang.org/x/arch/x86/x86asm"

// The evaluator of disasm_x86.go's values over decoded instructions: what
// each register and stack slot holds along one path through a function.

// trace is the result of evaluating one function.
type trace struct {
	accesses []access
	tail     uint64 // the first tail call's target out of the function, or 0
	tailRegs [16]val
	returns  []val // what %rax held at each ret
	insns    int
}

// evaluator state for one function.
type evaluator struct {
	env        codeEnv
	start, end uint64
	regs       [16]val
	// slots holds what was stored in the stack frame, by offset from %rsp:
	// compilers spill a loaded pointer and reload it (mov %rax,8(%rsp);
	// mov 8(%rsp),%rax). Anything that moves %rsp forgets them.
	slots map[int64]val
	out   trace
}

// evaluate sweeps code (the function at pc, code being all of it) with the
// register state regs at entry.
func evaluate(env codeEnv, pc uint64, code []byte, regs [16]val) trace {
	e := &evaluator{env: env, start: pc, end: pc + uint64(len(code)), regs: regs}
	insns := decodeAll(pc, code)
	e.out.insns = len(insns)
	for _, i := range insns {
		e.step(i)
	}
	return e.out
}

func (e *evaluator) get(a x86asm.Arg) val {
	r, ok := a.(x86asm.Reg)
	if !ok {
		return val{}
	}
	if f := regFamily(r); f >= 0 {
		return e.regs[f]
	}
	return val{}
}

// set writes v to register argument a; narrower writes keep nothing.
func (e *evaluator) set(a x86asm.Arg, v val) {
	r, ok := a.(x86asm.Reg)
	if !ok {
		return
	}
	f := regFamily(r)
	if f < 0 {
		return
	}
	if !is64(r) && v.kind != vNone {
		v = val{}
	}
	e.regs[f] = v
}

func (e *evaluator) clearAll() { e.regs = [16]val{}; e.slots = nil }

// stackSlot is the %rsp offset of a plain 8-byte stack operand.
func stackSlot(a x86asm.Arg) (int64, bool) {
	m, ok := a.(x86asm.Mem)
	if !ok || m.Base != x86asm.RSP || m.Index != 0 || m.Segment != 0 {
		return 0, false
	}
	return memDisp(m), true
}

// memBase resolves a memory operand to what its base held and its
// displacement; ok false if the base is unknown.
func (e *evaluator) memBase(i insn, m x86asm.Mem) (val, int64, bool) {
	if m.Segment != 0 {
		return val{}, 0, false
	}
	if m.Base == x86asm.RIP {
		t, _ := i.ripTarget(m)
		return val{kind: vAddr, addr: t}, 0, m.Index == 0
	}
	if f := regFamily(m.Base); f >= 0 && is64(m.Base) && e.regs[f].kind != vNone {
		return e.regs[f], memDisp(m), true
	}
	return val{}, 0, false
}

// load is what an 8-byte load through via+disp yields.
func (e *evaluator) load(via val, disp int64, ripSlot bool) val {
	switch via.kind {
	case vAddr:
		a := via.addr + uint64(disp)
		if ripSlot {
			// mov X(%rip),%r: X may be a GOT slot.
			s := e.env.slotAt(a)
			switch s.kind {
			case slotAddr:
				return val{kind: vAddr, addr: s.value}
			case slotTPOff:
				return val{kind: vTPOff, tls: tlsVar{model: "initial-exec", offset: int64(s.value), hasOffset: s.ok}}
			case slotTLSModule, slotTLSDesc:
				return val{}
			}
		}
		return val{kind: vValue, addr: a}
	case vTLSAddr:
		if disp == 0 {
			return val{kind: vTLSValue, tls: via.tls}
		}
	case vTLSBlock:
		t := via.tls
		t.offset += disp
		return val{kind: vTLSValue, tls: t}
	case vTP:
		if disp < 0 {
			return val{kind: vTLSValue, tls: tlsVar{model: "local-exec", tpOffset: disp, hasTP: true}}
		}
	case vValue:
		return val{kind: vField, addr: via.addr, field: disp}
	}
	return val{}
}

// fsOperand handles a %fs-relative memory operand: it yields the thread
// pointer (%fs:0), a local-exec variable (%fs:NEG), or the variable whose
// thread-pointer offset the base register holds (%fs:(%r)).
func (e *evaluator) fsOperand(m x86asm.Mem) (val, bool) {
	if m.Segment != x86asm.FS || m.Index != 0 {
		return val{}, false
	}
	if d := memDisp(m); m.Base == 0 {
		switch {
		case d == 0:
			return val{kind: vTP}, true
		case d < 0:
			return val{kind: vTLSValue, tls: tlsVar{model: "local-exec", tpOffset: d, hasTP: true}}, true
		}
		return val{}, false // the TCB: stack guard, pointer guard
	}
	if b := e.get(m.Base); b.kind == vTPOff && memDisp(m) == 0 {
		return val{kind: vTLSValue, tls: b.tls}, true
	}
	return val{}, false
}

func (e *evaluator) step(i insn) {
	in := i.inst
	// Record every memory operand with a known base.
	for _, a := range in.Args {
		m, ok := a.(x86asm.Mem)
		if !ok {
			continue
		}
		if via, disp, ok := e.memBase(i, m); ok {
			n := in.MemBytes
			if in.Op == x86asm.LEA {
				n = 0
			}
			e.out.accesses = append(e.out.accesses, access{pc: i.pc, via: via, disp: disp, bytes: n, indexed: m.Index != 0})
		}
	}
	if r, ok := in.Args[0].(x86asm.Reg); ok && r == x86asm.RSP {
		e.slots = nil // the frame moved: offsets no longer name the same slots
	}
	switch in.Op {
	case x86asm.PUSH, x86asm.POP:
		e.slots = nil
	}
	switch in.Op {
	case x86asm.RET:
		if len(e.out.returns) < maxInsns {
			e.out.returns = append(e.out.returns, e.regs[regFamily(x86asm.RAX)])
		}
		e.clearAll()
		return
	case x86asm.UD2, x86asm.HLT:
		e.clearAll()
		return
	case x86asm.JMP:
		if t, ok := i.branchTarget(); ok && (t < e.start || t >= e.end) && e.out.tail == 0 {
			e.out.tail, e.out.tailRegs = t, e.regs
		}
		e.clearAll()
		return
	case x86asm.CALL:
		e.call(i)
		return
	case x86asm.NOP, x86asm.CMP, x86asm.TEST, x86asm.PUSH, x86asm.BT, x86asm.PREFETCHT0,
		x86asm.PREFETCHT1, x86asm.PREFETCHT2, x86asm.PREFETCHNTA:
		return
	case x86asm.MOVZX:
		e.movzx(i)
		return
	case x86asm.SHR, x86asm.AND, x86asm.XOR:
		if e.bitOp(i) {
			return
		}
	case x86asm.XCHG, x86asm.XADD, x86asm.CMPXCHG, x86asm.CMPXCHG8B, x86asm.CMPXCHG16B,
		x86asm.MUL, x86asm.DIV, x86asm.IDIV, x86asm.CPUID, x86asm.RDTSC, x86asm.RDTSCP, x86asm.SYSCALL,
		x86asm.LEAVE:
		e.clearAll()
		return
	case x86asm.IMUL:
		if in.Args[1] == nil {
			e.clearAll()
			return
		}
	case x86asm.MOV:
		e.mov(i)
		return
	case x86asm.LEA:
		e.lea(i)
		return
	case x86asm.ADD:
		if e.add(i) {
			return
		}
	}
	if in.Op >= x86asm.JA && in.Op <= x86asm.JS && in.Op != x86asm.JMP {
		return // conditional jumps: the fall-through keeps the state
	}
	if in.Args[0] == nil {
		e.clearAll() // an instruction with implicit operands (cqo, movs, ...)
		return
	}
	e.set(in.Args[0], val{})
}

func (e *evaluator) mov(i insn) {
	in := i.inst
	dst, src := in.Args[0], in.Args[1]
	if off, ok := stackSlot(dst); ok {
		// A spill: remember an 8-byte register stored to the frame.
		v := val{}
		if r, ok := src.(x86asm.Reg); ok && is64(r) && in.MemBytes == 8 {
			v = e.get(r)
		}
		if e.slots == nil {
			e.slots = map[int64]val{}
		}
		if _, have := e.slots[off]; have || len(e.slots) < maxSlots {
			e.slots[off] = v
		}
		return
	}
	if _, ok := dst.(x86asm.Reg); !ok {
		return // a store
	}
	if off, ok := stackSlot(src); ok && in.MemBytes == 8 {
		e.set(dst, e.slots[off]) // a reload of a spill, or nothing known
		return
	}
	switch s := src.(type) {
	case x86asm.Reg:
		if v := e.get(s); v.kind == vBits {
			e.writeBits(dst.(x86asm.Reg), e.bitsOf(s))
			return
		}
		e.set(dst, e.get(s))
	case x86asm.Imm:
		// mov $NEG,%r before %fs:(%r): local exec in a PIE executable.
		if int64(s) < 0 && int64(s) > -(1<<31) {
			e.set(dst, val{kind: vTPOff, tls: tlsVar{model: "local-exec", tpOffset: int64(s), hasTP: true}})
			return
		}
		e.set(dst, val{})
	case x86asm.Mem:
		if v, ok := e.fsOperand(s); ok {
			e.set(dst, v)
			return
		}
		if w, ok := e.wordAt(i, s); ok {
			e.writeBits(dst.(x86asm.Reg), wordBits(w, 8*w.bytes))
			return
		}
		if in.MemBytes != 8 {
			e.set(dst, val{})
			return
		}
		via, disp, ok := e.memBase(i, s)
		if !ok || s.Index != 0 {
			e.set(dst, val{})
			return
		}
		e.set(dst, e.load(via, disp, s.Base == x86asm.RIP))
	default:
		e.set(dst, val{})
	}
}

func (e *evaluator) lea(i insn) {
	in := i.inst
	m, ok := in.Args[1].(x86asm.Mem)
	if !ok || m.Index != 0 {
		e.set(in.Args[0], val{})
		return
	}
	if m.Base == x86asm.RIP {
		t, _ := i.ripTarget(m)
		switch s := e.env.slotAt(t); s.kind {
		case slotTLSModule:
			e.set(in.Args[0], val{kind: vTLSArg, addr: t, gd: hasPrefix(in, x86asm.PrefixDataSize)})
		case slotTLSDesc:
			e.set(in.Args[0], val{kind: vTLSDesc, addr: t,
				tls: tlsVar{model: "TLS descriptor", offset: int64(s.value), hasOffset: s.ok}})
		default:
			e.set(in.Args[0], val{kind: vAddr, addr: t})
		}
		return
	}
	b, d := e.get(m.Base), memDisp(m)
	switch b.kind {
	case vAddr:
		e.set(in.Args[0], val{kind: vAddr, addr: b.addr + uint64(d)})
	case vTP:
		e.set(in.Args[0], val{kind: vTLSAddr, tls: tlsVar{model: "local-exec", tpOffset: d, hasTP: true}})
	case vTLSBlock:
		t := b.tls
		t.offset += d
		e.set(in.Args[0], val{kind: vTLSAddr, tls: t})
	default:
		e.set(in.Args[0], val{})
	}
}

// add handles the thread pointer plus an offset: add %fs:0,%r (r holding a
// TP offset) and add GOT(%rip),%r (r holding %fs:0, initial exec).
func (e *evaluator) add(i insn) bool {
	in := i.inst
	dst := e.get(in.Args[0])
	var other val
	switch s := in.Args[1].(type) {
	case x86asm.Mem:
		if v, ok := e.fsOperand(s); ok {
			other = v
		} else if via, disp, ok := e.memBase(i, s); ok && in.MemBytes == 8 {
			other = e.load(via, disp, s.Base == x86asm.RIP)
		}
	case x86asm.Reg:
		other = e.get(s)
	}
	var off val
	switch {
	case dst.kind == vTP && other.kind == vTPOff:
		off = other
	case dst.kind == vTPOff && other.kind == vTP:
		off = dst
	default:
		return false
	}
	e.set(in.Args[0], val{kind: vTLSAddr, tls: off.tls})
	return true
}

func (e *evaluator) call(i insn) {
	in := i.inst
	rdi, rax := e.regs[regFamily(x86asm.RDI)], e.regs[regFamily(x86asm.RAX)]
	// call *(%rax) with %rax a TLS descriptor: %rax becomes the variable's
	// offset from the thread pointer; every other register is preserved.
	if m, ok := in.Args[0].(x86asm.Mem); ok && m.Base == x86asm.RAX && m.Index == 0 && memDisp(m) == 0 && m.Segment == 0 && rax.kind == vTLSDesc {
		e.regs[regFamily(x86asm.RAX)] = val{kind: vTPOff, tls: rax.tls}
		return
	}
	var name string
	if t, ok := i.branchTarget(); ok {
		name = e.env.callee(t, false)
	} else if t, ok := i.ripTarget(in.Args[0]); ok {
		name = e.env.callee(t, true)
	}
	for _, r := range callerSaved {
		e.regs[regFamily(r)] = val{}
	}
	if rdi.kind != vTLSArg || name != "__tls_get_addr" {
		return
	}
	s := e.env.slotAt(rdi.addr)
	if rdi.gd {
		e.regs[regFamily(x86asm.RAX)] = val{kind: vTLSAddr,
			tls: tlsVar{model: "general-dynamic", offset: int64(s.value), hasOffset: s.ok, modGOT: rdi.addr}}
		return
	}
	e.regs[regFamily(x86asm.RAX)] = val{kind: vTLSBlock, tls: tlsVar{model: "local-dynamic", hasOffset: true, modGOT: rdi.addr}}
}

// regWidth is a general register's width in bits; 0 for AH, CH, DH and BH,
// which hold bits 8-15 and are not followed bit by bit.
func regWidth(r x86asm.Reg) int {
	switch {
	case r >= x86asm.RAX && r <= x86asm.R15:
		return 64
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return 32
	case r >= x86asm.AX && r <= x86asm.R15W:
		return 16
	case r >= x86asm.AL && r <= x86asm.BL, r >= x86asm.SPB && r <= x86asm.DIB, r >= x86asm.R8B && r <= x86asm.R15B:
		return 8
	}
	return 0
}

// bitsOf is what register r's bits hold (all unknown unless it is a vBits).
func (e *evaluator) bitsOf(r x86asm.Reg) regBits {
	f := regFamily(r)
	if f < 0 || regWidth(r) == 0 || e.regs[f].kind != vBits {
		return unknownBits()
	}
	return *e.regs[f].bits
}

// writeBits stores res, a value as wide as register r, into r the way
// x86_64 writes: a 32-bit write zeroes bits 32-63, 8- and 16-bit writes keep
// the register's other bits (those of another word become unknown).
func (e *evaluator) writeBits(r x86asm.Reg, res regBits) {
	f, w := regFamily(r), regWidth(r)
	if f < 0 {
		return
	}
	if w == 0 {
		e.regs[f] = val{}
		return
	}
	if w == 32 {
		for i := 32; i < 64; i++ {
			res.bit[i] = bitZero
		}
	}
	if w < 32 {
		old := e.bitsOf(r)
		for i := w; i < 64; i++ {
			b := old.bit[i]
			if b >= 0 {
				switch {
				case !res.hasWord:
					res.word, res.hasWord = old.word, true
				case !res.word.same(old.word):
					b = bitUnknown
				}
			}
			res.bit[i] = b
		}
	}
	known, word := false, false
	for _, b := range res.bit {
		known = known || b != bitUnknown
		word = word || b >= 0
	}
	if !known {
		e.regs[f] = val{}
		return
	}
	res.hasWord = word
	e.regs[f] = val{kind: vBits, bits: &res}
}

// wordAt says whether memory operand m is a plain field of a struct whose
// pointer a register holds as a vField: a word rb_during_gc may read.
func (e *evaluator) wordAt(i insn, m x86asm.Mem) (wordRef, bool) {
	n := i.inst.MemBytes
	via, disp, ok := e.memBase(i, m)
	if !ok || m.Index != 0 || via.kind != vField || (n != 1 && n != 2 && n != 4 && n != 8) {
		return wordRef{}, false
	}
	return wordRef{base: via, disp: disp, bytes: n}, true
}

// movzx follows a zero extension, from a register or from a word.
func (e *evaluator) movzx(i insn) {
	in := i.inst
	dst, ok := in.Args[0].(x86asm.Reg)
	if !ok {
		return
	}
	src, n := unknownBits(), 0
	switch s := in.Args[1].(type) {
	case x86asm.Reg:
		src, n = e.bitsOf(s), regWidth(s)
	case x86asm.Mem:
		n = 8 * in.MemBytes
		if w, ok := e.wordAt(i, s); ok {
			src = wordBits(w, n)
		}
	}
	out := unknownBits()
	out.word, out.hasWord = src.word, src.hasWord
	for k := 0; k < regWidth(dst) && n > 0; k++ {
		out.bit[k] = bitZero
		if k < n {
			out.bit[k] = src.bit[k]
		}
	}
	e.writeBits(dst, out)
}

// bitOp follows shr by a constant, and with a constant, and xor of a
// register with itself (zero); false for anything else.
func (e *evaluator) bitOp(i insn) bool {
	in := i.inst
	dst, ok := in.Args[0].(x86asm.Reg)
	w := regWidth(dst)
	if !ok || w == 0 {
		return false
	}
	if in.Op == x86asm.XOR {
		if src, ok := in.Args[1].(x86asm.Reg); !ok || src != dst {
			return false
		}
		out := unknownBits()
		for k := 0; k < w; k++ {
			out.bit[k] = bitZero
		}
		e.writeBits(dst, out)
		return true
	}
	imm, ok := in.Args[1].(x86asm.Imm)
	if !ok {
		return false
	}
	old := e.bitsOf(dst)
	out := old
	n := int(uint64(imm) & 31)
	if w == 64 {
		n = int(uint64(imm) & 63)
	}
	for k := 0; k < w; k++ {
		switch in.Op {
		case x86asm.SHR:
			out.bit[k] = bitZero
			if k+n < w {
				out.bit[k] = old.bit[k+n]
			}
		case x86asm.AND:
			if uint64(imm)>>k&1 == 0 {
				out.bit[k] = bitZero
			}
		}
	}
	e.writeBits(dst, out)
	return true
}
