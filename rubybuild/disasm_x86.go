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

// maxSlots bounds the stack slots remembered in one function.
const maxSlots = 64

// callerSaved are clobbered by a call (System V AMD64).
var callerSaved = []x86asm.Reg{x86asm.RAX, x86asm.RCX, x86asm.RDX, x86asm.RSI, x86asm.RDI,
	x86asm.R8, x86asm.R9, x86asm.R10, x86asm.R11}

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
