package rubybuild

import (
	"debug/elf"
	"errors"
	"fmt"
	"strings"

	"github.com/rubyperf/rubyperf/debuginfo"
	"golang.org/x/arch/x86/x86asm"
)

// Disassembly fallbacks for stripped Rubies: 3.3+ hide ruby_current_ec,
// ruby_current_vm_ptr, ruby_global_symbols and rb_shape_tree_ptr (and some
// builds rb_vm_exec). Each is found through several exported functions whose
// code reads it, checked against the Layout where the code goes on to read a
// field (vm->objspace, ec->thread_ptr, ...). Every candidate that names the
// variable must name the same one; a disagreement means not found.
//
// The candidates, from Debian's libruby 3.1.2, 3.1.7, 3.3.8, 3.3.14 and 3.4.11
// (gcc, -fPIC, -fcf-protection from 3.3) and our own source builds:
//
//	ruby_current_ec      rb_thread_current (ec->thread_ptr), rb_block_given_p and
//	                     rb_keyword_given_p (ec->cfp), rb_errinfo
//	ruby_current_vm_ptr  rb_during_gc, rb_gc_count (≤3.3), rb_gc_latest_gc_info (≤3.3),
//	                     rb_gc_get_objspace (3.4+): all then read vm->objspace
//	ruby_global_symbols  rb_id2str (a tail call to get_id_serial_entry: the
//	                     32-bit counter, then ids), rb_sym_immortal_count (the counter)
//	rb_shape_tree_ptr    rb_shape_get_shape_by_id, rb_shape_id: both then read shape_list
//	rb_vm_exec           the tail calls of rb_iseq_eval and rb_iseq_eval_main

// elfEnv answers the evaluator's questions from the ELF file: relocations of
// GOT slots, PLT stubs' targets. It caches what it reads, for one search.
type elfEnv struct {
	b        *Binary
	relByOff map[uint64]relocation
	plt      map[uint64]relocation // .rela.plt by GOT slot
	dynsyms  []elf.Symbol
	loaded   bool
}

func newELFEnv(b *Binary) *elfEnv { return &elfEnv{b: b} }

func (e *elfEnv) load() {
	if e.loaded {
		return
	}
	e.loaded = true
	e.relByOff = map[uint64]relocation{}
	for _, r := range e.b.relocations() {
		e.relByOff[r.off] = r
	}
	e.plt = map[uint64]relocation{}
	if s := e.b.elf.f.Section(".rela.plt"); s != nil && s.Size/24 <= maxRelocations {
		if data, err := e.b.elf.sectionData(s); err == nil {
			for i := 0; i+24 <= len(data); i += 24 {
				info := le64(data[i+8:])
				e.plt[le64(data[i:])] = relocation{off: le64(data[i:]), typ: uint32(info), sym: uint32(info >> 32),
					addend: int64(le64(data[i+16:]))}
			}
		}
	}
	_ = debuginfo.Guard(func() error {
		var err error
		e.dynsyms, err = e.b.elf.f.DynamicSymbols()
		return err
	})
}

func (e *elfEnv) sym(i uint32) (elf.Symbol, bool) {
	if i == 0 || int(i) > len(e.dynsyms) {
		return elf.Symbol{}, false
	}
	return e.dynsyms[i-1], true // DynamicSymbols drops the null symbol 0
}

// symValue is a relocation's S + A, ok false for an undefined symbol.
func (e *elfEnv) symValue(r relocation) (uint64, bool) {
	if r.sym == 0 {
		return uint64(r.addend), true
	}
	s, ok := e.sym(r.sym)
	if !ok || s.Section == elf.SHN_UNDEF {
		return 0, false
	}
	return s.Value + uint64(r.addend), true
}

func (e *elfEnv) slotAt(addr uint64) slot {
	e.load()
	r, ok := e.relByOff[addr]
	if !ok {
		if strings.HasPrefix(e.b.elf.sectionAt(addr), ".got") {
			w, err := e.b.elf.readVaddr(addr, 8) // no relocation: the link-time value stands
			if err == nil {
				return slot{kind: slotAddr, value: le64(w), ok: true}
			}
		}
		return slot{kind: slotData}
	}
	switch elf.R_X86_64(r.typ) {
	case elf.R_X86_64_RELATIVE:
		return slot{kind: slotAddr, value: uint64(r.addend), ok: true}
	case elf.R_X86_64_GLOB_DAT, elf.R_X86_64_64:
		v, ok := e.symValue(r)
		if !ok {
			return slot{kind: slotData} // another object's variable
		}
		return slot{kind: slotAddr, value: v, ok: true}
	case elf.R_X86_64_DTPMOD64:
		off, err := e.b.dtpoff(addr + 8)
		return slot{kind: slotTLSModule, value: uint64(off), ok: err == nil}
	case elf.R_X86_64_TPOFF64:
		v, ok := e.symValue(r)
		return slot{kind: slotTPOff, value: v, ok: ok}
	case elf.R_X86_64_TLSDESC:
		v, ok := e.symValue(r)
		return slot{kind: slotTLSDesc, value: v, ok: ok}
	}
	return slot{kind: slotData}
}

// callee names what a call reaches: through a PLT stub (.plt, .plt.sec,
// .plt.got: endbr64; bnd jmp *GOT(%rip)), or through a GOT slot directly.
func (e *elfEnv) callee(addr uint64, throughGOT bool) string {
	e.load()
	if !throughGOT {
		sec := e.b.elf.sectionAt(addr)
		if !strings.HasPrefix(sec, ".plt") {
			return ""
		}
		code, err := e.b.elf.readVaddr(addr, 16)
		if err != nil {
			return ""
		}
		found := false
		for _, i := range decodeAll(addr, code) {
			if i.inst.Op != x86asm.JMP {
				continue
			}
			if t, ok := i.ripTarget(i.inst.Args[0]); ok {
				addr, found = t, true
			}
			break
		}
		if !found {
			return ""
		}
	}
	r, ok := e.plt[addr]
	if !ok {
		r, ok = e.relByOff[addr]
	}
	if !ok {
		return ""
	}
	if s, ok := e.sym(r.sym); ok {
		if i := strings.IndexByte(s.Name, '@'); i >= 0 {
			return s.Name[:i]
		}
		return s.Name
	}
	return ""
}

// isData says whether addr is in a writable section that is not a GOT: where
// a global variable lives.
func (b *Binary) isData(addr uint64) bool {
	for _, s := range b.elf.f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && addr >= s.Addr && addr-s.Addr < s.Size {
			return s.Flags&elf.SHF_WRITE != 0 && s.Flags&elf.SHF_TLS == 0 && !strings.HasPrefix(s.Name, ".got")
		}
	}
	return false
}

// funcCode returns exported function fn's code: its symbol's size, else up
// to the next FDE (.eh_frame_hdr), at most maxFuncBytes.
func (e *elfEnv) funcCode(fn string) (uint64, []byte, error) {
	s, ok := e.b.syms[fn]
	if !ok || s.Type != elf.STT_FUNC {
		return 0, nil, errors.New("not exported")
	}
	code, err := e.codeAt(s.Value, s.Size)
	return s.Value, code, err
}

// localCode returns the code of the local function at pc (a tail call's
// target), bounded by the next FDE; nil if pc is not in .text.
func (e *elfEnv) localCode(pc uint64) []byte {
	if e.b.elf.sectionAt(pc) != ".text" {
		return nil
	}
	code, _ := e.codeAt(pc, 0)
	return code
}

func (e *elfEnv) codeAt(pc, size uint64) ([]byte, error) {
	if size == 0 || size > maxFuncBytes {
		size = maxFuncBytes
		if end, ok := e.b.elf.functionEnd(pc); ok && end > pc && end-pc < maxFuncBytes {
			size = end - pc
		}
	}
	code, err := e.b.elf.readVaddr(pc, int(size))
	for err != nil && size > 64 { // near a segment's end
		size /= 2
		code, err = e.b.elf.readVaddr(pc, int(size))
	}
	return code, err
}

func (e *elfEnv) isData(addr uint64) bool { return e.b.isData(addr) }

// traceFunc evaluates exported function fn, following up to maxHops tail
// calls (with the registers at the jump) into local functions.
func traceFunc(env codeEnv, fn string) ([]access, error) {
	tr, err := traceCode(env, fn)
	return tr.accesses, err
}

// traceCode is traceFunc with what %rax held at each return as well: the
// accesses and returns of fn and of the tail calls it was followed into.
func traceCode(env codeEnv, fn string) (trace, error) {
	pc, code, err := env.funcCode(fn)
	if err != nil {
		return trace{}, err
	}
	var all trace
	var regs [16]val
	for hop := 0; ; hop++ {
		tr := evaluate(env, pc, code, regs)
		all.accesses = append(all.accesses, tr.accesses...)
		all.returns = append(all.returns, tr.returns...)
		all.insns += tr.insns
		if tr.tail == 0 || hop == maxHops {
			break
		}
		if code = env.localCode(tr.tail); len(code) == 0 {
			break
		}
		pc, regs = tr.tail, tr.tailRegs
	}
	return all, nil
}

// candidate is one exported function that reads an anchor.
type candidate struct {
	fn string
	// field is the offset the code must read through the variable's value
	// (vm->objspace, ec->thread_ptr, ...); -1 accepts any.
	field int64
	what  string // the field's name, for messages
}

// verdict gathers what the candidates of one anchor said.
type verdict struct {
	agree   []string // candidates that found the value
	found   bool
	value   string // the value found, for messages
	tried   []string
	failed  []string // "fn: why"
	clash   string
	checked bool // at least one candidate was checked against a Layout field
}

// add records that candidate fn names value; it says whether fn is the first.
func (v *verdict) add(fn string, value string, checked bool) bool {
	if v.clash != "" {
		return false
	}
	if v.found && value != v.value {
		v.clash = fmt.Sprintf("%s names %s but %s names %s", strings.Join(v.agree, ", "), v.value, fn, value)
		return false
	}
	first := !v.found
	v.found, v.value = true, value
	v.agree = append(v.agree, fn)
	v.checked = v.checked || checked
	return first
}

func (v *verdict) fail(fn, why string) { v.failed = append(v.failed, fn+": "+why) }

// trace tries candidate fn: the accesses of fn (traceFunc), or false when
// it cannot be traced, as v records.
func (v *verdict) trace(env codeEnv, fn string) ([]access, bool) {
	v.tried = append(v.tried, fn)
	acc, err := traceFunc(env, fn)
	if err != nil {
		v.fail(fn, err.Error())
		return nil, false
	}
	return acc, true
}

// err is nil when the candidates agree and one was checked.
func (v *verdict) err() error {
	switch {
	case v.clash != "":
		return fmt.Errorf("no symbol; disassembly: candidates disagree: %s", v.clash)
	case !v.found:
		return fmt.Errorf("no symbol; disassembly of %s found nothing (%s)", strings.Join(v.tried, ", "), strings.Join(v.failed, "; "))
	case !v.checked:
		return fmt.Errorf("no symbol; disassembly of %s names %s, but no candidate confirms it with a field read (%s)",
			strings.Join(v.agree, ", "), v.value, strings.Join(v.failed, "; "))
	}
	return nil
}

// how names the agreeing candidates, with detail about what they read.
func (v *verdict) how(detail string) string {
	if n := len(v.tried); n > 1 {
		detail += fmt.Sprintf("; %d of %d candidates agree", len(v.agree), n)
	}
	return "disassembly of " + strings.Join(v.agree, ", ") + " (" + detail + ")"
}

func errNotX86(name string) error {
	return fmt.Errorf("no symbol, and the disassembly fallback for %s supports x86_64 only", name)
}

// currentECFromCode fills dst from findCurrentEC (with no Layout, any
// field read through the EC confirms it): the offset in the module's TLS
// block, and for an executable the offset from the thread pointer.
func (b *Binary) currentECFromCode(env codeEnv, dst *Anchor, l *Layout) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return errNotX86(dst.Name)
	}
	tv, how, err := findCurrentEC(env, l)
	if err != nil {
		return err
	}
	blk, isExec := int64(0), false
	if b.isExecutable() {
		blk, isExec = b.execTLSBlockSize()
	}
	a := Anchor{Name: dst.Name, Found: true, Size: 8, How: how, TLSModuleGOT: tv.modGOT}
	switch {
	case tv.hasTP:
		if !isExec {
			return fmt.Errorf("no symbol; %s: local-exec TLS, but the file is not an executable with PT_TLS", how)
		}
		a.TPOffset, a.HasTPOffset, a.TLSOffset = tv.tpOffset, true, tv.tpOffset+blk
	default:
		a.TLSOffset = tv.offset
		if isExec {
			a.TPOffset, a.HasTPOffset = tv.offset-blk, true
		}
	}
	if a.TLSModuleGOT == 0 {
		a.TLSModuleGOT = b.tlsModuleGOT() // initial exec or TLS descriptors: any DTPMOD64 slot of the module
	}
	*dst = a
	return nil
}

// findCurrentEC finds ruby_current_ec: each candidate's first read of a
// thread-local variable's value, and a read of the Layout's EC field through
// it (any read with no Layout).
func findCurrentEC(env codeEnv, l *Layout) (tlsVar, string, error) {
	cands := []candidate{{"rb_errinfo", -1, ""}}
	if l != nil {
		cands = append([]candidate{
			{"rb_thread_current", l.ExecutionContext.ThreadPtr, "ec->thread_ptr"},
			{"rb_block_given_p", l.ExecutionContext.CFP, "ec->cfp"},
			{"rb_keyword_given_p", l.ExecutionContext.CFP, "ec->cfp"}}, cands...)
	} else {
		cands = append([]candidate{{"rb_thread_current", -1, ""}, {"rb_block_given_p", -1, ""},
			{"rb_keyword_given_p", -1, ""}}, cands...)
	}
	v := verdict{}
	var tv tlsVar
	for _, c := range cands {
		acc, ok := v.trace(env, c.fn)
		if !ok {
			continue
		}
		t, ok, why := firstTLSRead(acc, c)
		if !ok {
			v.fail(c.fn, why)
			continue
		}
		if !t.hasOffset && !t.hasTP {
			v.fail(c.fn, "a "+t.model+" access whose offset the relocations do not give")
			continue
		}
		key := fmt.Sprintf("TLS offset %#x", t.offset)
		if !t.hasOffset {
			key = fmt.Sprintf("TP offset %d", t.tpOffset)
		}
		if v.add(c.fn, key+" ("+t.model+")", c.field >= 0 || l == nil) {
			tv = t
		}
	}
	if err := v.err(); err != nil {
		return tlsVar{}, "", err
	}
	return tv, v.how(tv.model + " TLS"), nil
}

// firstTLSRead finds the first read of a thread-local variable's value and
// checks the code reads c.field through it.
func firstTLSRead(acc []access, c candidate) (tlsVar, bool, string) {
	for _, a := range acc {
		if a.via.kind != vTLSValue || a.indexed {
			continue
		}
		t := a.via.tls
		// The first TLS value read names the variable; the field check
		// looks at every read through that same variable.
		if c.field < 0 {
			return t, true, ""
		}
		for _, b := range acc {
			if b.via.kind == vTLSValue && b.via.tls.same(t) && !b.indexed && b.disp == c.field {
				return t, true, ""
			}
		}
		return t, false, fmt.Sprintf("reads a %s thread-local but not %s at %d through it", t.model, c.what, c.field)
	}
	return tlsVar{}, false, "no thread-local access this decoder knows"
}

// globalValueRead finds a global variable whose value the code reads and
// then reads c.field through (c.field -1: any read through it).
func globalValueRead(env codeEnv, acc []access, c candidate) (uint64, bool, string) {
	var seen []uint64
	for _, a := range acc {
		if a.via.kind != vValue || a.indexed || (c.field >= 0 && a.disp != c.field) {
			if a.via.kind == vValue {
				seen = append(seen, a.via.addr)
			}
			continue
		}
		if !env.isData(a.via.addr) {
			return 0, false, fmt.Sprintf("%#x, read through at %d, is not in a data section", a.via.addr, a.disp)
		}
		return a.via.addr, true, ""
	}
	if len(seen) > 0 {
		return 0, false, fmt.Sprintf("reads through global %#x but not %s at %d", seen[0], c.what, c.field)
	}
	return 0, false, "no load of a global this decoder knows"
}

// findPointerGlobal finds a pointer-sized global through candidates that
// load it and read a field through it.
func findPointerGlobal(env codeEnv, cands []candidate) (uint64, string, error) {
	v := verdict{}
	var addr uint64
	for _, c := range cands {
		acc, ok := v.trace(env, c.fn)
		if !ok {
			continue
		}
		a, ok, why := globalValueRead(env, acc, c)
		if !ok {
			v.fail(c.fn, why)
			continue
		}
		if v.add(c.fn, fmt.Sprintf("%#x", a), c.field >= 0) {
			addr = a
		}
	}
	if err := v.err(); err != nil {
		return 0, "", err
	}
	return addr, v.how(fmt.Sprintf("then %s at %d", cands[0].what, cands[0].field)), nil
}

// globalAnchor fills dst with the address of a global, size bytes (0:
// not known), that find finds in the code.
func (b *Binary) globalAnchor(dst *Anchor, size uint64, find func() (uint64, string, error)) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return errNotX86(dst.Name)
	}
	addr, how, err := find()
	if err != nil {
		return err
	}
	*dst = Anchor{Name: dst.Name, Found: true, Address: addr, Size: size, How: how}
	return nil
}

// vmPtrFromCode finds ruby_current_vm_ptr: GC entry points load it and
// read vm->objspace (≤3.3 objspace, 3.4+ gc.objspace) at the Layout's offset.
func (b *Binary) vmPtrFromCode(env codeEnv, dst *Anchor, l *Layout) error {
	return b.globalAnchor(dst, 8, func() (uint64, string, error) { return findVMPtr(env, l) })
}

func findVMPtr(env codeEnv, l *Layout) (uint64, string, error) {
	if l.VM.ObjSpace <= 0 {
		return 0, "", errors.New("no symbol, and the Layout has no vm->objspace offset to check a disassembly with")
	}
	var cands []candidate
	for _, fn := range []string{"rb_during_gc", "rb_gc_count", "rb_gc_latest_gc_info", "rb_gc_get_objspace"} {
		cands = append(cands, candidate{fn, l.VM.ObjSpace, "vm->objspace"})
	}
	return findPointerGlobal(env, cands)
}

// shapeTreeFromCode finds rb_shape_tree_ptr: rb_shape_get_shape_by_id
// and rb_shape_id load it and read shape_list at the Layout's offset.
func (b *Binary) shapeTreeFromCode(env codeEnv, dst *Anchor, l *Layout) error {
	return b.globalAnchor(dst, 8, func() (uint64, string, error) { return findShapeTree(env, l) })
}

func findShapeTree(env codeEnv, l *Layout) (uint64, string, error) {
	if l.Shape.TreeShapeList < 0 {
		return 0, "", errors.New("no symbol, and the Layout has no rb_shape_tree_t.shape_list offset to check a disassembly with")
	}
	var cands []candidate
	for _, fn := range []string{"rb_shape_get_shape_by_id", "rb_shape_id"} {
		cands = append(cands, candidate{fn, l.Shape.TreeShapeList, "shape_list"})
	}
	return findPointerGlobal(env, cands)
}

// globalSymbolsFromCode finds ruby_global_symbols: rb_id2str (through
// its tail call) compares an ID's serial with the table's 32-bit counter and
// then loads the ids array, the Layout's distance apart; rb_sym_immortal_count
// returns the counter.
func (b *Binary) globalSymbolsFromCode(env codeEnv, dst *Anchor, l *Layout) error {
	return b.globalAnchor(dst, 0, func() (uint64, string, error) { return findGlobalSymbols(env, l) })
}

func findGlobalSymbols(env codeEnv, l *Layout) (uint64, string, error) {
	counter := l.Symbols.LastID
	if counter < 0 {
		counter = l.Symbols.NextID
	}
	if counter < 0 || l.Symbols.IDs < 0 {
		return 0, "", errors.New("no symbol, and the Layout has no rb_symbols_t counter and ids to check a disassembly with")
	}
	dist := uint64(l.Symbols.IDs - counter)
	v := verdict{}
	var table uint64
	for _, fn := range []string{"rb_id2str", "rb_sym_immortal_count"} {
		acc, ok := v.trace(env, fn)
		if !ok {
			continue
		}
		// Accesses to a known address: RIP-relative, or through a register
		// holding a global's address.
		width := map[uint64]int{}
		var order []uint64
		for _, a := range acc {
			if a.via.kind != vAddr || a.indexed || a.bytes == 0 {
				continue
			}
			t := a.via.addr + uint64(a.disp)
			if _, dup := width[t]; !dup {
				order = append(order, t)
			}
			width[t] = a.bytes
		}
		found := false
		for _, t := range order {
			if width[t] != 4 || !env.isData(t) {
				continue
			}
			if fn == "rb_sym_immortal_count" { // the counter alone: agreement, no check
				v.add(fn, fmt.Sprintf("%#x", t-uint64(counter)), false)
				found = true
				break
			}
			if _, ok := width[t+dist]; ok {
				if v.add(fn, fmt.Sprintf("%#x", t-uint64(counter)), true) {
					table = t - uint64(counter)
				}
				found = true
				break
			}
		}
		if !found && fn == "rb_sym_immortal_count" {
			v.fail(fn, "no 32-bit load of a global")
		} else if !found {
			v.fail(fn, fmt.Sprintf("no 32-bit counter and ids %d bytes apart", dist))
		}
	}
	if err := v.err(); err != nil {
		return 0, "", err
	}
	if table == 0 { // only the unchecked candidate: v.err refuses that
		return 0, "", errors.New("no symbol; disassembly: internal error")
	}
	return table, v.how(fmt.Sprintf("counter and ids %d bytes apart", dist)), nil
}

// vmExecByDisassembly finds rb_vm_exec through rb_iseq_eval and
// rb_iseq_eval_main, exported functions that both end in a tail call to it
// (vm_exec). Both must agree.
func (b *Binary) vmExecByDisassembly(dst *Anchor) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return errNotX86(dst.Name)
	}
	var target uint64
	for _, fn := range []string{"rb_iseq_eval", "rb_iseq_eval_main"} {
		pc, code, err := b.funcBytes(fn, 2048)
		if err != nil {
			return fmt.Errorf("no symbol; disassembly: %w", err)
		}
		end := pc + uint64(len(code))
		var found []uint64
		for _, i := range decodeAll(pc, code) {
			if t, ok := i.branchTarget(); ok && i.inst.Op == x86asm.JMP && (t < pc || t >= end) {
				found = append(found, t)
			}
		}
		if len(found) == 0 {
			return fmt.Errorf("no symbol, and %s has no tail call", fn)
		}
		t := found[len(found)-1]
		for _, f := range found {
			if f != t {
				return fmt.Errorf("no symbol, and %s tail-calls more than one function", fn)
			}
		}
		if sec := b.elf.sectionAt(t); sec == ".plt" || sec == ".plt.sec" {
			return fmt.Errorf("no symbol; %s tail-calls through the PLT (an exported rb_vm_exec would have a symbol)", fn)
		}
		if target != 0 && t != target {
			return fmt.Errorf("no symbol; rb_iseq_eval and rb_iseq_eval_main tail-call %#x and %#x", target, t)
		}
		target = t
	}
	*dst = Anchor{Name: dst.Name, Found: true, Address: target,
		How: "disassembly of rb_iseq_eval and rb_iseq_eval_main (tail calls)"}
	if end, ok := b.elf.functionEnd(target); ok {
		dst.Size = end - target
		dst.How += ", size from its call frame information"
	}
	return nil
}

// dtpoff returns the value the dynamic linker stores in a DTPOFF64 GOT slot:
// the variable's offset in the module's TLS block.
func (b *Binary) dtpoff(slot uint64) (int64, error) {
	if r, ok := b.relocationAt(slot); ok {
		if r.typ != uint32(elf.R_X86_64_DTPOFF64) {
			return 0, fmt.Errorf("GOT slot %#x has relocation type %d, want R_X86_64_DTPOFF64", slot, r.typ)
		}
		if r.sym == 0 {
			return r.addend, nil
		}
		v, ok := b.dynsymValue(r.sym)
		if !ok {
			return 0, fmt.Errorf("GOT slot %#x: bad symbol index %d", slot, r.sym)
		}
		return int64(v) + r.addend, nil
	}
	w, err := b.elf.readVaddr(slot, 8) // no relocation: the link-time value stands
	if err != nil {
		return 0, err
	}
	return int64(le64(w)), nil
}
