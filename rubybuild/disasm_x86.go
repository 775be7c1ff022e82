package rubybuild

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// A small symbolic evaluator over x86_64 code, for the disassembly fallbacks
// (disasm_anchors.go). It sweeps a function's instructions in address order
// and tracks what each general register holds, as far as the fallbacks care:
// the address or the value of a global variable, or a thread-local variable in
// one of the ELF TLS access models, a field read through a global's value
// (vm->objspace), and, bit by bit, what a bit-field extraction (load, shift,
// mask) leaves of a word read through such a field. Every memory operand
// whose base it knows becomes an access event, and every return records what
// %rax holds. It never follows conditional branches: after an unconditional
// jump or a return it forgets everything, so code after an early return is
// still read, with no stale state.
//
// The shapes it knows are the ones gcc and clang emit for -fPIC and PIE code,
// with and without -fcf-protection (endbr64 at every entry):
//
//	lea X(%rip),%r ; mov (%r),%r          a global through a relaxed GOT load
//	mov GOT(%rip),%r ; mov (%r),%r        a global through its GOT slot
//	mov X(%rip),%r                        a global's value, directly
//	data16 lea P(%rip),%rdi ; call __tls_get_addr      general dynamic TLS
//	lea P(%rip),%rdi ; call __tls_get_addr ; OFF(%rax) local dynamic TLS
//	lea D(%rip),%rax ; call *(%rax) ; %fs:(%rax)        TLS descriptors (gnu2)
//	mov GOT(%rip),%r ; mov %fs:(%r),%r    initial exec TLS (or add %fs:0,%r)
//	mov %fs:NEG,%r | mov %fs:0,%r;NEG(%r) | mov $NEG,%r;%fs:(%r)  local exec TLS
//
// All decoding is bounded: maxFuncBytes and maxInsns per function, maxHops
// tail calls followed.
const (
	maxFuncBytes = 1024 // bytes of one function decoded
	maxInsns     = 256  // instructions decoded per function
	maxHops      = 2    // tail calls followed
)

// valKind is what a register is known to hold.
type valKind uint8

const (
	vNone     valKind = iota
	vAddr             // the address addr (of a global, or inside one)
	vValue            // the 8-byte value stored at addr
	vTLSArg           // the address of a GD/LD GOT pair (the __tls_get_addr argument) at addr
	vTLSDesc          // the address of a TLS descriptor at addr
	vTLSBlock         // the address of this module's TLS block (local dynamic, t.offset 0)
	vTPOff            // thread-local t's offset from the thread pointer
	vTP               // the thread pointer (%fs:0)
	vTLSAddr          // the address of thread-local t in this thread
	vTLSValue         // the 8-byte value of thread-local t in this thread
	vField            // the 8-byte value at offset field of the struct whose address global addr holds
	vBits             // bit by bit, a word read through a vField, shifted and masked (bits says how)
)

// tlsVar is a thread-local variable as the code names it.
type tlsVar struct {
	model     string // "general-dynamic", "local-dynamic", "TLS descriptor", "initial-exec", "local-exec"
	offset    int64  // in the module's TLS block (st_value), if hasOffset
	hasOffset bool
	tpOffset  int64 // from the thread pointer (local exec), if hasTP
	hasTP     bool
	modGOT    uint64 // GOT slot with the module id (R_X86_64_DTPMOD64), or 0
}

// same says whether two accesses name the same variable.
func (t tlsVar) same(u tlsVar) bool {
	if t.hasOffset && u.hasOffset {
		return t.offset == u.offset
	}
	if t.hasTP && u.hasTP {
		return t.tpOffset == u.tpOffset
	}
	return false
}

type val struct {
	kind  valKind
	addr  uint64
	field int64 // vField: the offset read through the global's value
	tls   tlsVar
	gd    bool     // vTLSArg: loaded with the general-dynamic data16 prefix
	bits  *regBits // vBits; never changed once made, so vals copy freely
}

// wordRef is a word the code read through a field of a global's struct
// (objspace->flags through vm->objspace).
type wordRef struct {
	base  val   // what the load's base register held: a vField
	disp  int64 // the word's offset from it
	bytes int   // the load's width
}

func (w wordRef) same(u wordRef) bool {
	return w.base.kind == u.base.kind && w.base.addr == u.base.addr && w.base.field == u.base.field &&
		w.disp == u.disp && w.bytes == u.bytes
}

// What a register bit holds, besides bit n (0..63) of regBits.word.
const (
	bitUnknown int8 = -1
	bitZero    int8 = -2
)

// regBits is what each bit of a register holds: a bit of one word, zero, or
// unknown. Following bits one by one reads the shapes gcc and clang give a
// one-bit field read (movzbl, or a byte or 32-bit load; shr; and) at every -O
// level exactly, with no pattern per shape to keep in step with them.
type regBits struct {
	word    wordRef
	hasWord bool // some bit names a bit of word
	bit     [64]int8
}

func unknownBits() regBits {
	var r regBits
	for i := range r.bit {
		r.bit[i] = bitUnknown
	}
	return r
}

// wordBits is a load of the word w: bit i holds its bit i, for n bits.
func wordBits(w wordRef, n int) regBits {
	r := unknownBits()
	r.word, r.hasWord = w, true
	for i := 0; i < n && i < 64; i++ {
		r.bit[i] = int8(i)
	}
	return r
}

// singleBit says whether the low 32 bits (an int return value) are one bit
// of the word in bit 0 and zeros, and which; zero says they are all zero.
func (r regBits) singleBit() (bit int, ok, zero bool) {
	zero = true
	for i := 0; i < 32; i++ {
		if r.bit[i] != bitZero {
			zero = false
		}
		if i > 0 && r.bit[i] != bitZero {
			return 0, false, false
		}
	}
	if zero {
		return 0, false, true
	}
	if r.bit[0] < 0 || !r.hasWord {
		return 0, false, false
	}
	return int(r.bit[0]), true, false
}

// access is one memory operand whose base register (or RIP) was known.
type access struct {
	pc      uint64
	via     val   // what the base held; RIP-relative operands are via vAddr
	disp    int64 // displacement from it
	bytes   int   // access width; 0 for an operand that is not read or written (lea)
	indexed bool  // an index register takes part: not a plain field
}

// slotKind is what the dynamic linker (or the link editor) stores in a word.
type slotKind uint8

const (
	slotData      slotKind = iota // ordinary data: no relocation, not in a GOT
	slotAddr                      // an address (R_X86_64_RELATIVE, GLOB_DAT, 64, or a GOT's link-time value)
	slotTLSModule                 // a module id (R_X86_64_DTPMOD64): the first word of a GD/LD pair
	slotTPOff                     // an offset from the thread pointer (R_X86_64_TPOFF64)
	slotTLSDesc                   // a TLS descriptor (R_X86_64_TLSDESC)
)

// slot is a word's resolved meaning: for slotAddr the address, for the TLS
// kinds the variable's offset in the module's TLS block (for a GD pair the
// second word's DTPOFF; ok false if that is unknown).
type slot struct {
	kind  slotKind
	value uint64
	ok    bool
}

// codeEnv is what the evaluator needs to know about the file around the code.
type codeEnv interface {
	slotAt(addr uint64) slot
	// callee names the function a direct call to addr reaches when addr is a
	// PLT stub, or the function whose address GOT slot addr holds; "" if
	// unknown.
	callee(addr uint64, throughGOT bool) string
	// funcCode returns an exported function's address and code.
	funcCode(fn string) (uint64, []byte, error)
	// localCode returns the code of a local function (a tail call's target).
	localCode(pc uint64) []byte
	// isData says whether addr is where a global variable can live.
	isData(addr uint64) bool
}

// regFamily maps a general register of any width to 0..15; -1 for others.
func regFamily(r x86asm.Reg) int {
	switch {
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX)
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX)
	case r >= x86asm.AL && r <= x86asm.BL:
		return int(r - x86asm.AL)
	case r >= x86asm.AH && r <= x86asm.BH:
		return int(r - x86asm.AH)
	case r >= x86asm.SPB && r <= x86asm.DIB:
		return int(r-x86asm.SPB) + 4
	case r >= x86asm.R8B && r <= x86asm.R15B:
		return int(r-x86asm.R8B) + 8
	}
	return -1
}

func is64(r x86asm.Reg) bool { return r >= x86asm.RAX && r <= x86asm.R15 }

// isEndbr reports endbr64/endbr32, which x86asm does not decode.
func isEndbr(code []byte) bool {
	return len(code) >= 4 && code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && (code[3] == 0xfa || code[3] == 0xfb)
}

func hasPrefix(in x86asm.Inst, p x86asm.Prefix) bool {
	for _, q := range in.Prefix {
		if q == 0 {
			break
		}
		if q&0xff == p {
			return true
		}
	}
	return false
}

type insn struct {
	pc   uint64
	inst x86asm.Inst
}

// decodeAll decodes code at pc in address order, skipping endbr64, up to
// maxInsns instructions or the first undecodable byte.
func decodeAll(pc uint64, code []byte) []insn {
	var out []insn
	for len(code) > 0 && len(out) < maxInsns {
		if isEndbr(code) {
			pc, code = pc+4, code[4:]
			continue
		}
		in, err := x86asm.Decode(code, 64)
		if err != nil || in.Len == 0 || in.Len > len(code) {
			break
		}
		out = append(out, insn{pc, in})
		pc += uint64(in.Len)
		code = code[in.Len:]
	}
	return out
}

// memDisp is a memory operand's displacement, sign-extended: x86asm keeps a
// disp32 zero-extended (0xfffffff8 for -8), though the CPU sign-extends it.
func memDisp(m x86asm.Mem) int64 {
	if m.Disp >= 0 && m.Disp <= 0xffffffff {
		return int64(int32(uint32(m.Disp)))
	}
	return m.Disp
}

// ripTarget returns the address a RIP-relative memory operand names.
func (i insn) ripTarget(a x86asm.Arg) (uint64, bool) {
	m, ok := a.(x86asm.Mem)
	if !ok || m.Base != x86asm.RIP || m.Index != 0 {
		return 0, false
	}
	return uint64(int64(i.pc) + int64(i.inst.Len) + memDisp(m)), true
}

// branchTarget returns the target of a direct jmp or call.
func (i insn) branchTarget() (uint64, bool) {
	if i.inst.Op != x86asm.JMP && i.inst.Op != x86asm.CALL {
		return 0, false
	}
	r, ok := i.inst.Args[0].(x86asm.Rel)
	if !ok {
		return 0, false
	}
	return uint64(int64(i.pc) + int64(i.inst.Len) + int64(r)), true
}

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

// maxSlots bounds the stack slots remembered in one function.
const maxSlots = 64

// stackSlot is the %rsp offset of a plain 8-byte stack operand.
func stackSlot(a x86asm.Arg) (int64, bool) {
	m, ok := a.(x86asm.Mem)
	if !ok || m.Base != x86asm.RSP || m.Index != 0 || m.Segment != 0 {
		return 0, false
	}
	return memDisp(m), true
}

// callerSaved are clobbered by a call (System V AMD64).
var callerSaved = []x86asm.Reg{x86asm.RAX, x86asm.RCX, x86asm.RDX, x86asm.RSI, x86asm.RDI,
	x86asm.R8, x86asm.R9, x86asm.R10, x86asm.R11}

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

func (v val) String() string {
	switch v.kind {
	case vAddr:
		return fmt.Sprintf("&%#x", v.addr)
	case vValue:
		return fmt.Sprintf("*%#x", v.addr)
	case vTLSAddr, vTLSValue:
		return fmt.Sprintf("tls(%s %d tp %d)", v.tls.model, v.tls.offset, v.tls.tpOffset)
	case vField:
		return fmt.Sprintf("*%#x->%d", v.addr, v.field)
	}
	return fmt.Sprintf("kind %d", v.kind)
}
