package rubybuild

import (
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// RSymbol.id for layouts that lack it. Built-in tables were generated before
// the Layout read struct RSymbol, so a stripped Ruby (distro packages) could
// not name a dynamic Symbol. rb_sym2id, exported by every CRuby 3.1-4.0,
// returns exactly that member for one (symbol.c):
//
//	if (STATIC_SYM_P(sym)) id = STATIC_SYM2ID(sym);
//	else if (DYNAMIC_SYM_P(sym)) {           special-const checks, then
//	                                         (flags & RUBY_T_MASK) == RUBY_T_SYMBOL
//	    lock; sym = dsymbol_check(sym)       ≤3.4: a garbage Symbol is reallocated
//	    id = RSYMBOL(sym)->id;               the 8-byte load this reads
//	    if (!(id & ~ID_SCOPE_MASK)) { ... RSYMBOL(sym)->id = id |= num; }
//	    unlock }
//	else rb_raise(...);
//	return id;
//
// Unlike rb_during_gc, the value is returned from a block that jumps back to
// a shared epilogue (mov %rbp,%rax; ret), so a sweep in address order does not
// see it: this follows the code's paths. It starts with the argument in %rdi,
// forks at each conditional jump (a state met again at a jump target is not
// followed twice), follows tail calls and jumps into local functions (gcc's
// rb_sym2id.part.0 in a static ruby: the type check, then a jump to the rest;
// cold parts),
// and marks a path as typed when it passes the check of the argument's type
// bits, (flags & RUBY_T_MASK) compared with a tag. Every typed path that
// returns a value read through the argument must return the same 8-byte load
// at sym+N, and every check must be against the same tag: RUBY_T_SYMBOL where
// the layout has it, otherwise a tag that is none of the layout's other
// RUBY_T_* types. Anything else is ambiguous and not found.
//
// What the builds here gave (Debian's libruby 3.1.2 (twice), 3.3.8, 3.3.14 and
// 3.4.11; source 3.1.2 shared, 3.3.8 static, CET and shared, 3.4.5 shared):
// an 8-byte load at sym+32 after the check against 0x14, stored back when it
// assigns a new ID; DWARF says RSymbol.id is at 32 in every source build.

// symbolIDFunc is the exported function whose code gives RSymbol.id.
const symbolIDFunc = "rb_sym2id"

// maxSymbolBytes bounds an RSymbol: it lives in one 40-byte slot (the
// smallest size pool's) in every CRuby 3.x, so its ID lies below 64 bytes.
const maxSymbolBytes = 64

// Bounds of the path search, over all paths of one function.
const (
	maxPathSteps  = 8 * maxInsns // instructions evaluated
	maxPathStates = 2 * maxInsns // distinct states kept at jump targets
)

// findSymbolID reads RSymbol.id from rb_sym2id: the offset of the 8-byte
// field it returns after checking that its argument is a T_SYMBOL object,
// checked against the Layout's RBasic, RUBY_T_MASK and (if it has it)
// RUBY_T_SYMBOL.
func findSymbolID(env codeEnv, l *Layout) (int64, string, error) {
	f, err := findSymbol(env, l)
	return f.off, f.how, err
}

// symbolFound is what rb_sym2id's code says of a dynamic Symbol: where it
// keeps its ID, and the type tag it is checked against (RUBY_T_SYMBOL,
// which a built-in table lacks).
type symbolFound struct {
	off, tag int64
	how      string
}

// findSymbol is findSymbolID, with the type tag.
func findSymbol(env codeEnv, l *Layout) (symbolFound, error) {
	tmask, ok := l.Constants["RUBY_T_MASK"]
	if !ok || tmask <= 0 || l.Basic.Flags < 0 || l.Basic.Klass < 0 {
		return symbolFound{}, errors.New("the layout has no RBasic and RUBY_T_MASK to check a disassembly with")
	}
	fn := symbolIDFunc
	tr, err := tracePaths(env, fn, l.Basic.Flags, uint64(tmask))
	if err != nil {
		return symbolFound{}, fmt.Errorf("%s: %w", fn, err)
	}
	if tr.exhausted {
		return symbolFound{}, fmt.Errorf("%s: more paths than this decoder follows (%d instructions, %d states)",
			fn, tr.steps, tr.states)
	}
	checked := fmt.Sprintf("flags&%#x", tmask)
	switch len(tr.tags) {
	case 0:
		return symbolFound{}, fmt.Errorf("%s: no check of the argument's type (%s at +%d) this decoder can follow",
			fn, checked, l.Basic.Flags)
	case 1:
	default:
		return symbolFound{}, fmt.Errorf("%s: checks the argument's type against %s: ambiguous",
			fn, hexList(slices.Sorted(slices.Values(tr.tags))))
	}
	tag := tr.tags[0]
	if want, ok := l.Constants["RUBY_T_SYMBOL"]; ok && tag != want {
		return symbolFound{}, fmt.Errorf("%s: checks the argument's type against %#x, not RUBY_T_SYMBOL (%#x)", fn, tag, want)
	} else if !ok {
		for _, name := range slices.Sorted(maps.Keys(l.Constants)) {
			if strings.HasPrefix(name, "RUBY_T_") && name != "RUBY_T_MASK" && l.Constants[name] == tag {
				return symbolFound{}, fmt.Errorf("%s: checks the argument's type against %#x, which is %s", fn, tag, name)
			}
		}
	}
	var fields []symVal
	for _, r := range tr.returns {
		switch r.kind {
		case pNone: // a value computed on the way (a new ID): not a member
		case pField:
			if !slices.Contains(fields, r) {
				fields = append(fields, r)
			}
		default:
			return symbolFound{}, fmt.Errorf("%s: returns %s after the type check, not a member of it", fn, r)
		}
	}
	switch len(fields) {
	case 0:
		return symbolFound{}, fmt.Errorf("%s: returns no member of the object after its type check against %#x", fn, tag)
	case 1:
	default:
		var s []string
		for _, f := range fields {
			s = append(s, f.String())
		}
		return symbolFound{}, fmt.Errorf("%s: returns %s after its type check: ambiguous", fn, strings.Join(s, " and "))
	}
	f := fields[0]
	switch {
	case f.bytes != 8:
		return symbolFound{}, fmt.Errorf("%s: returns %s, not an 8-byte ID", fn, f)
	case f.disp%8 != 0:
		return symbolFound{}, fmt.Errorf("%s: returns %s, not 8-byte aligned", fn, f)
	case f.disp < l.Basic.Klass+8:
		return symbolFound{}, fmt.Errorf("%s: returns %s, inside RBasic (klass at %d)", fn, f, l.Basic.Klass)
	case f.disp >= maxSymbolBytes:
		return symbolFound{}, fmt.Errorf("%s: returns %s, past a Symbol's %d bytes", fn, f, maxSymbolBytes)
	}
	how := fmt.Sprintf("disassembly of %s (8-byte load at sym+%d returned after the type check %s == %#x",
		fn, f.disp, checked, tag)
	if slices.Contains(tr.stores, f.disp) {
		how += ", stored there when it assigns an ID"
	}
	return symbolFound{f.disp, tag, how + ")"}, nil
}

func hexList(v []int64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%#x", x))
	}
	return strings.Join(s, " and ")
}

// fillSymbolID completes a layout that lacks RSymbol.id (a built-in table)
// from this binary's rb_sym2id, and says on the layout how, or why not. It
// leaves a layout that has it as it is: DWARF's offset stands.
func (b *Binary) fillSymbolID(l *Layout) {
	if l.Symbol.ID > 0 {
		return
	}
	if b.elf.f.Machine != elf.EM_X86_64 {
		l.Symbol.IDWhy = "not in the layout, and the disassembly of " + symbolIDFunc + " supports x86_64 only"
		return
	}
	f, err := findSymbol(newELFEnv(b), l)
	if err != nil {
		l.Symbol.IDWhy = "not in the layout; " + err.Error()
		return
	}
	l.setSymbolID(f.off, f.how)
	if l.Symbol.Type < 0 {
		l.Symbol.Type = f.tag // the type rb_sym2id checks it against
	}
}

// setSymbolID puts an RSymbol.id found outside the layout's source into it.
// Structs stays as the source gave it: a table has no RSymbol, and its size
// is not known.
func (l *Layout) setSymbolID(off int64, how string) {
	l.Symbol.ID, l.Symbol.IDHow, l.Symbol.IDWhy = off, how, ""
}

// symbolIDAnchor reports where the layout's RSymbol.id came from, as a line
// among the anchors (it is not a symbol): `rubyperf offsets` lists it with
// how it was found, or why not.
func symbolIDAnchor(l *Layout) Anchor {
	a := Anchor{Name: "RSymbol.id"}
	switch {
	case l == nil:
		a.Why = "no layout"
	case l.Symbol.ID > 0:
		how := l.Symbol.IDHow
		if how == "" {
			how = "layout " + l.Source
		}
		a.Found = true
		a.How = fmt.Sprintf("offset %d, %s", l.Symbol.ID, how)
	case l.Symbol.IDWhy != "":
		a.Why = l.Symbol.IDWhy
	default:
		a.Why = "not in the layout"
	}
	return a
}

// The path evaluator. It knows less than the sweep of disasm_x86.go (no
// globals, no TLS) and one thing more: what a register holds relative to the
// function's first argument.

type pathKind uint8

const (
	pNone  pathKind = iota
	pArg            // the first argument (%rdi at entry): sym
	pField          // a load of bytes at sym+disp; under 8 bytes, its low bits
	pType           // sym's flags & mask in the register's low width bits (all of it when width ≥ 32)
)

type symVal struct {
	kind  pathKind
	disp  int64
	bytes int
	mask  uint64
	width int
}

func (v symVal) String() string {
	switch v.kind {
	case pArg:
		return "the argument"
	case pField:
		return fmt.Sprintf("the %d-byte member at sym+%d", v.bytes, v.disp)
	case pType:
		return fmt.Sprintf("its type bits (flags&%#x)", v.mask)
	}
	return "nothing known"
}

// pathState is one path's state at pc.
type pathState struct {
	pc    uint64
	code  *pathCode
	hops  int
	regs  [16]symVal
	slots map[int64]symVal // spilled to the frame, by offset from %rsp
	typed bool             // the path passed the check of the argument's type
	// cmp is a pending compare of the type bits with tag, for the next
	// conditional jump.
	cmp    bool
	cmpTag int64
}

func (s *pathState) fork() pathState {
	c := *s
	c.slots = maps.Clone(s.slots)
	return c
}

func (s *pathState) key() string {
	b := fmt.Appendf(nil, "%x|%x|%d|%v|%v|%d|%v|", s.pc, s.code.start, s.hops, s.typed, s.cmp, s.cmpTag, s.regs)
	for _, off := range slices.Sorted(maps.Keys(s.slots)) {
		b = fmt.Appendf(b, "%d:%v,", off, s.slots[off])
	}
	return string(b)
}

// pathCode is one function's decoded instructions.
type pathCode struct {
	start, end uint64
	insns      []insn
	at         map[uint64]int  // instruction index by pc
	leaders    map[uint64]bool // jump targets inside it, and its start
}

func decodePathCode(pc uint64, code []byte) *pathCode {
	c := &pathCode{start: pc, end: pc + uint64(len(code)), insns: decodeAll(pc, code),
		at: map[uint64]int{}, leaders: map[uint64]bool{pc: true}}
	at := pc
	for i, in := range c.insns {
		for ; at < in.pc; at += 4 {
			c.at[at] = i // an endbr64 decodeAll skipped: a jump to it reaches in
		}
		c.at[in.pc] = i
		at = in.pc + uint64(in.inst.Len)
	}
	for _, in := range c.insns {
		if t, ok := in.jumpTarget(); ok {
			c.leaders[t] = true
		}
	}
	return c
}

// jumpTarget is the target of a direct jmp or conditional jump.
func (i insn) jumpTarget() (uint64, bool) {
	if i.inst.Op != x86asm.JMP && !isCondJump(i.inst.Op) {
		return 0, false
	}
	r, ok := i.inst.Args[0].(x86asm.Rel)
	if !ok {
		return 0, false
	}
	return uint64(int64(i.pc) + int64(i.inst.Len) + int64(r)), true
}

func isCondJump(op x86asm.Op) bool {
	switch op {
	case x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return op >= x86asm.JA && op <= x86asm.JS && op != x86asm.JMP
}

// pathTrace is what the paths of one function did.
type pathTrace struct {
	returns   []symVal // what %rax held at each return of a typed path
	stores    []int64  // offsets of 8-byte stores through sym on typed paths
	tags      []int64  // the tags the type checks that were passed compare with
	steps     int
	states    int
	exhausted bool
}

// tracePaths follows every path of exported function fn, the argument in
// %rdi; flags is RBasic.flags's offset and tmask RUBY_T_MASK.
func tracePaths(env codeEnv, fn string, flags int64, tmask uint64) (pathTrace, error) {
	pc, code, err := env.funcCode(fn)
	if err != nil {
		return pathTrace{}, err
	}
	p := &pather{env: env, flags: flags, tmask: tmask, seen: map[string]bool{}, codes: map[uint64]*pathCode{}}
	first := pathState{pc: pc, code: decodePathCode(pc, code)}
	p.codes[pc] = first.code
	first.regs[regFamily(x86asm.RDI)] = symVal{kind: pArg}
	p.work = append(p.work, first)
	for len(p.work) > 0 && !p.out.exhausted {
		s := p.work[len(p.work)-1]
		p.work = p.work[:len(p.work)-1]
		p.run(s)
	}
	p.out.states = len(p.seen)
	return p.out, nil
}

type pather struct {
	env   codeEnv
	flags int64
	tmask uint64
	work  []pathState
	seen  map[string]bool
	codes map[uint64]*pathCode
	out   pathTrace
}

// run follows one path to its end, queueing the other side of each fork.
func (p *pather) run(s pathState) {
	for {
		idx, ok := s.code.at[s.pc]
		if !ok {
			return // past the decoded code, or into the middle of an instruction
		}
		if s.code.leaders[s.pc] {
			k := s.key()
			if p.seen[k] {
				return
			}
			if len(p.seen) >= maxPathStates {
				p.out.exhausted = true
				return
			}
			p.seen[k] = true
		}
		if p.out.steps++; p.out.steps > maxPathSteps {
			p.out.exhausted = true
			return
		}
		i := s.code.insns[idx]
		next := i.pc + uint64(i.inst.Len)
		switch op := i.inst.Op; {
		case op == x86asm.RET:
			if s.typed && len(p.out.returns) < maxInsns {
				p.out.returns = append(p.out.returns, s.regs[regFamily(x86asm.RAX)])
			}
			return
		case op == x86asm.UD2 || op == x86asm.HLT || op == x86asm.INT:
			return
		case op == x86asm.JMP:
			t, ok := i.jumpTarget()
			if !ok {
				return // an indirect jump
			}
			if t >= s.code.start && t < s.code.end {
				s.pc = t
				continue
			}
			if !p.tailCall(&s, t) {
				return
			}
			continue
		case isCondJump(op):
			if t, ok := i.jumpTarget(); ok {
				taken := s.fork()
				taken.pc = t
				if s.cmp && op == x86asm.JE {
					p.passType(&taken)
				}
				// Out of the function: a conditional tail call, or its
				// cold part.
				if (t >= s.code.start && t < s.code.end) || p.tailCall(&taken, t) {
					p.work = append(p.work, taken)
				}
			}
			if s.cmp && op == x86asm.JNE {
				p.passType(&s)
			}
			s.pc = next
			continue
		case op == x86asm.CALL:
			if p.noReturn(i) {
				return
			}
			for _, r := range callerSaved {
				s.regs[regFamily(r)] = symVal{}
			}
			s.cmp = false
		default:
			p.step(&s, i)
		}
		s.pc = next
	}
}

// noReturns are functions a call to which does not come back: the bytes
// after it belong to another block, reached from elsewhere with its own
// state.
var noReturns = map[string]bool{"rb_raise": true, "rb_bug": true, "rb_exc_raise": true, "rb_fatal": true,
	"rb_sys_fail": true, "rb_memerror": true, "__stack_chk_fail": true, "abort": true}

// noReturn says whether call i reaches one of noReturns (through the PLT or a
// GOT slot: the only calls whose callee the file names).
func (p *pather) noReturn(i insn) bool {
	if t, ok := i.branchTarget(); ok {
		return noReturns[p.env.callee(t, false)]
	}
	if t, ok := i.ripTarget(i.inst.Args[0]); ok {
		return noReturns[p.env.callee(t, true)]
	}
	return false
}

// passType marks a path that took the type check's equal side.
func (p *pather) passType(s *pathState) {
	s.typed = true
	if !slices.Contains(p.out.tags, s.cmpTag) {
		p.out.tags = append(p.out.tags, s.cmpTag)
	}
}

// tailCall moves s into the local function at t, up to maxHops times.
func (p *pather) tailCall(s *pathState, t uint64) bool {
	if s.hops >= maxHops {
		return false
	}
	c, ok := p.codes[t]
	if !ok {
		code := p.env.localCode(t)
		if len(code) == 0 {
			return false
		}
		c = decodePathCode(t, code)
		p.codes[t] = c
	}
	s.code, s.pc, s.hops = c, t, s.hops+1
	s.slots, s.cmp = nil, false
	return true
}

// flagsPreserving are the instructions between a compare and its jump that
// leave the flags as they are.
func flagsPreserving(op x86asm.Op) bool {
	switch op {
	case x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD, x86asm.LEA, x86asm.NOP, x86asm.PUSH, x86asm.POP,
		x86asm.PREFETCHT0, x86asm.PREFETCHT1, x86asm.PREFETCHT2, x86asm.PREFETCHNTA:
		return true
	}
	return op >= x86asm.CMOVA && op <= x86asm.CMOVS
}

func (p *pather) get(s *pathState, a x86asm.Arg) symVal {
	if r, ok := a.(x86asm.Reg); ok {
		if f := regFamily(r); f >= 0 {
			return s.regs[f]
		}
	}
	return symVal{}
}

func (p *pather) set(s *pathState, a x86asm.Arg, v symVal) {
	if r, ok := a.(x86asm.Reg); ok {
		if f := regFamily(r); f >= 0 {
			if regWidth(r) == 0 {
				v = symVal{}
			}
			s.regs[f] = v
		}
	}
}

// throughArg says whether memory operand m is a plain member of the object
// the argument points at, and at which offset.
func throughArg(s *pathState, m x86asm.Mem) (int64, bool) {
	if m.Segment != 0 || m.Index != 0 || !is64(m.Base) {
		return 0, false
	}
	f := regFamily(m.Base)
	if f < 0 || s.regs[f].kind != pArg {
		return 0, false
	}
	return memDisp(m), true
}

// step evaluates one instruction that neither branches nor calls.
func (p *pather) step(s *pathState, i insn) {
	in := i.inst
	if r, ok := in.Args[0].(x86asm.Reg); (ok && r == x86asm.RSP) || in.Op == x86asm.PUSH || in.Op == x86asm.POP {
		s.slots = nil // the frame moved
	}
	if !flagsPreserving(in.Op) {
		s.cmp = false
	}
	switch op := in.Op; {
	case op == x86asm.NOP || op == x86asm.TEST || op == x86asm.BT || op == x86asm.PUSH ||
		(op >= x86asm.PREFETCHNTA && op <= x86asm.PREFETCHT2):
		return
	case op == x86asm.CMP:
		p.compare(s, i)
		return
	case op == x86asm.MOV:
		p.mov(s, i)
		return
	case op == x86asm.MOVZX || op == x86asm.MOVSX || op == x86asm.MOVSXD:
		p.extend(s, i)
		return
	case op == x86asm.AND:
		p.and(s, i)
		return
	case writesFirstOnly(op) && (op != x86asm.IMUL || in.Args[1] != nil):
		p.set(s, in.Args[0], symVal{}) // a store, or any other result: unknown
		return
	}
	// Anything else may write registers it does not name (mul, div, cqo,
	// string instructions, xchg, leave, ...): forget everything.
	s.regs, s.slots = [16]symVal{}, nil
}

// writesFirstOnly are the instructions whose only register result is their
// first operand.
func writesFirstOnly(op x86asm.Op) bool {
	switch op {
	case x86asm.ADD, x86asm.SUB, x86asm.OR, x86asm.XOR, x86asm.ADC, x86asm.SBB, x86asm.SHL, x86asm.SHR,
		x86asm.SAR, x86asm.ROL, x86asm.ROR, x86asm.RCL, x86asm.RCR, x86asm.SHLD, x86asm.SHRD, x86asm.INC,
		x86asm.DEC, x86asm.NEG, x86asm.NOT, x86asm.LEA, x86asm.POP, x86asm.BSWAP, x86asm.BSF, x86asm.BSR,
		x86asm.TZCNT, x86asm.LZCNT, x86asm.POPCNT, x86asm.BTS, x86asm.BTR, x86asm.BTC, x86asm.MOVD,
		x86asm.MOVQ, x86asm.IMUL:
		return true
	}
	return (op >= x86asm.CMOVA && op <= x86asm.CMOVS) || (op >= x86asm.SETA && op <= x86asm.SETS)
}

func (p *pather) mov(s *pathState, i insn) {
	in := i.inst
	dst, src := in.Args[0], in.Args[1]
	if m, ok := dst.(x86asm.Mem); ok {
		if off, ok := stackSlot(m); ok {
			v := symVal{}
			if r, ok := src.(x86asm.Reg); ok && is64(r) && in.MemBytes == 8 {
				v = p.get(s, r)
			}
			if _, have := s.slots[off]; have || len(s.slots) < maxSlots {
				if s.slots == nil {
					s.slots = map[int64]symVal{}
				}
				s.slots[off] = v
			}
		} else if d, ok := throughArg(s, m); ok && s.typed && in.MemBytes == 8 && !slices.Contains(p.out.stores, d) &&
			len(p.out.stores) < maxSlots {
			p.out.stores = append(p.out.stores, d)
		}
		return
	}
	r, ok := dst.(x86asm.Reg)
	if !ok {
		return
	}
	switch sv := src.(type) {
	case x86asm.Reg:
		if is64(r) && is64(sv) {
			p.set(s, r, p.get(s, sv))
			return
		}
	case x86asm.Mem:
		if off, ok := stackSlot(sv); ok && in.MemBytes == 8 {
			p.set(s, r, s.slots[off])
			return
		}
		if d, ok := throughArg(s, sv); ok {
			p.set(s, r, symVal{kind: pField, disp: d, bytes: in.MemBytes})
			return
		}
	}
	p.set(s, r, symVal{})
}

// extend follows movzx and movsx: of a member's low bits, they are its low bits.
func (p *pather) extend(s *pathState, i insn) {
	in := i.inst
	v := symVal{}
	switch sv := in.Args[1].(type) {
	case x86asm.Mem:
		if d, ok := throughArg(s, sv); ok {
			v = symVal{kind: pField, disp: d, bytes: in.MemBytes}
		}
	case x86asm.Reg:
		if f := p.get(s, sv); f.kind == pField && regWidth(sv) > 0 {
			v = f
			v.bytes = min(f.bytes, regWidth(sv)/8)
		}
	}
	p.set(s, in.Args[0], v)
}

// and follows the mask of the type bits out of the flags.
func (p *pather) and(s *pathState, i insn) {
	in := i.inst
	r, ok := in.Args[0].(x86asm.Reg)
	imm, isImm := in.Args[1].(x86asm.Imm)
	w := regWidth(r)
	if !ok || !isImm || w == 0 {
		p.set(s, in.Args[0], symVal{})
		return
	}
	mask := uint64(imm)
	if w < 64 {
		mask &= 1<<w - 1
	}
	v := p.get(s, r)
	switch {
	case v.kind == pField && v.disp == p.flags && (v.bytes >= 8 || mask < 1<<(8*v.bytes)):
		p.set(s, r, symVal{kind: pType, mask: mask, width: w})
	case v.kind == pType:
		// Bits the first and cleared stay clear: the result is known as
		// wide as this and writes when the mask fits the known bits.
		nw := min(v.width, w)
		if v.width >= 32 || mask < 1<<v.width {
			nw = w
		}
		p.set(s, r, symVal{kind: pType, mask: v.mask & mask, width: nw})
	default:
		p.set(s, r, symVal{})
	}
}

// compare records a compare of the type bits (under RUBY_T_MASK) with a tag.
func (p *pather) compare(s *pathState, i insn) {
	in := i.inst
	r, ok := in.Args[0].(x86asm.Reg)
	imm, isImm := in.Args[1].(x86asm.Imm)
	if !ok || !isImm {
		return
	}
	v, w := p.get(s, r), regWidth(r)
	tag := uint64(imm)
	if w < 64 {
		tag &= 1<<w - 1
	}
	if v.kind != pType || v.mask != p.tmask || w == 0 || (v.width < 32 && w > v.width) ||
		(w < 64 && p.tmask >= 1<<w) || tag&^p.tmask != 0 {
		return
	}
	s.cmp, s.cmpTag = true, int64(tag)
}
