package rubystack

import (
	"debug/elf"
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Disassembly fallbacks for stripped Rubies (3.3+ hide ruby_current_ec and
// ruby_global_symbols). They read a few instructions of exported functions whose
// code must name the hidden variable. All decoding is bounded.
const (
	maxFuncBytes = 512 // bytes of one function decoded
	maxInsns     = 128 // instructions decoded per function
	maxHops      = 2   // tail calls followed
)

type insn struct {
	pc   uint64
	inst x86asm.Inst
}

// decode decodes up to maxInsns instructions of code at pc, stopping at ret.
func decode(pc uint64, code []byte) []insn {
	var out []insn
	for len(code) > 0 && len(out) < maxInsns {
		in, err := x86asm.Decode(code, 64)
		if err != nil || in.Len == 0 {
			break
		}
		out = append(out, insn{pc, in})
		pc += uint64(in.Len)
		code = code[in.Len:]
		if in.Op == x86asm.RET || in.Op == x86asm.UD2 || in.Op == x86asm.JMP {
			break // the function ends here, or tail-calls another
		}
	}
	return out
}

// ripTarget returns the address a RIP-relative memory operand names.
func (i insn) ripTarget(a x86asm.Arg) (uint64, bool) {
	m, ok := a.(x86asm.Mem)
	if !ok || m.Base != x86asm.RIP {
		return 0, false
	}
	return uint64(int64(i.pc) + int64(i.inst.Len) + m.Disp), true
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

// currentECByDisassembly finds ruby_current_ec through rb_thread_current,
// which reads it first thing: general-dynamic TLS in a shared libruby
// (lea GOTPAIR(%rip),%rdi; call __tls_get_addr) or local-exec TLS in an
// executable (mov %fs:NEG,%reg).
func (b *Binary) currentECByDisassembly(dst *Anchor) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("no symbol, and the disassembly fallback supports x86_64 only")
	}
	const fn = "rb_thread_current"
	pc, code, err := b.funcBytes(fn, maxFuncBytes)
	if err != nil {
		return fmt.Errorf("no symbol; disassembly: %w", err)
	}
	insns := decode(pc, code)
	for k, i := range insns {
		in := i.inst
		// General dynamic: the GOT pair {DTPMOD64, DTPOFF64} of the variable.
		if in.Op == x86asm.LEA && in.Args[0] == x86asm.RDI && k+1 < len(insns) && insns[k+1].inst.Op == x86asm.CALL {
			pair, ok := i.ripTarget(in.Args[1])
			if !ok {
				continue
			}
			off, err := b.dtpoff(pair + 8)
			if err != nil {
				return fmt.Errorf("no symbol; disassembly of %s: %w", fn, err)
			}
			*dst = Anchor{Name: dst.Name, Found: true, Size: 8, TLSOffset: off, TLSModuleGOT: pair,
				How: "disassembly of " + fn + " (general-dynamic TLS)"}
			return nil
		}
		// Local exec: %fs:NEG, or %fs:0 into a register then NEG(reg).
		if tp, ok := localExecOffset(insns[k:]); ok {
			blk, ok := b.execTLSBlockSize()
			if !ok {
				return fmt.Errorf("no symbol; %s uses local-exec TLS but the file has no PT_TLS", fn)
			}
			*dst = Anchor{Name: dst.Name, Found: true, Size: 8, TPOffset: tp, HasTPOffset: true,
				TLSOffset: tp + blk, How: "disassembly of " + fn + " (local-exec TLS)"}
			return nil
		}
	}
	return fmt.Errorf("no symbol, and %s has no TLS access this decoder knows", fn)
}

// localExecOffset recognises a thread-pointer-relative load at the start of
// insns, in the three forms compilers emit:
//
//	mov %fs:NEG,%reg
//	mov %fs:0,%reg ; mov NEG(%reg),%reg
//	mov $NEG,%reg ; mov %fs:(%reg),%reg      (gcc, PIE executables)
func localExecOffset(insns []insn) (int64, bool) {
	in := insns[0].inst
	if in.Op != x86asm.MOV {
		return 0, false
	}
	if imm, ok := in.Args[1].(x86asm.Imm); ok && int64(imm) < 0 && len(insns) > 1 {
		reg, _ := in.Args[0].(x86asm.Reg)
		next := insns[1].inst
		if nm, ok := next.Args[1].(x86asm.Mem); ok && next.Op == x86asm.MOV && nm.Segment == x86asm.FS &&
			nm.Base == reg && nm.Index == 0 && nm.Disp == 0 {
			return int64(imm), true
		}
		return 0, false
	}
	m, ok := in.Args[1].(x86asm.Mem)
	if !ok || m.Segment != x86asm.FS || m.Base != 0 || m.Index != 0 {
		return 0, false
	}
	if m.Disp < 0 { // mov %fs:NEG,%reg (positive offsets are the TCB: stack guard at 0x28)
		return m.Disp, true
	}
	if m.Disp != 0 || len(insns) < 2 {
		return 0, false
	}
	reg, ok := in.Args[0].(x86asm.Reg)
	if !ok {
		return 0, false
	}
	next := insns[1].inst
	for _, a := range next.Args {
		if nm, ok := a.(x86asm.Mem); ok && nm.Base == reg && nm.Index == 0 && nm.Disp < 0 {
			return nm.Disp, true
		}
	}
	return 0, false
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

// globalSymbolsByDisassembly finds ruby_global_symbols through rb_id2str,
// which (directly or through one tail call) compares an ID's serial with the
// table's 32-bit counter and then loads the table's ids array: two accesses
// to one object, the distance between rb_symbols_t's counter and ids apart.
func (b *Binary) globalSymbolsByDisassembly(dst *Anchor, l *Layout) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return errors.New("no symbol, and the disassembly fallback supports x86_64 only")
	}
	counter := l.Symbols.LastID
	if counter < 0 {
		counter = l.Symbols.NextID
	}
	dist := uint64(l.Symbols.IDs - counter)
	const fn = "rb_id2str"
	pc, code, err := b.funcBytes(fn, maxFuncBytes)
	if err != nil {
		return fmt.Errorf("no symbol; disassembly: %w", err)
	}
	type access struct{ bits int }
	seen := map[uint64]access{}
	var order []uint64
	for hop := 0; hop <= maxHops; hop++ {
		var next uint64
		for _, i := range decode(pc, code) {
			for _, a := range i.inst.Args {
				if t, ok := i.ripTarget(a); ok {
					if _, dup := seen[t]; !dup {
						order = append(order, t)
					}
					seen[t] = access{i.inst.MemBytes * 8}
				}
			}
			if t, ok := i.branchTarget(); ok && next == 0 && i.inst.Op == x86asm.JMP {
				next = t
			}
		}
		for _, t := range order {
			if seen[t].bits == 32 {
				if _, ok := seen[t+dist]; ok {
					*dst = Anchor{Name: dst.Name, Found: true, Address: t - uint64(counter),
						How: fmt.Sprintf("disassembly of %s (counter and ids %d bytes apart)", fn, dist)}
					return nil
				}
			}
		}
		if next == 0 {
			break
		}
		pc = next
		if code, err = b.elf.readVaddr(pc, maxFuncBytes); err != nil {
			if code, err = b.elf.readVaddr(pc, 64); err != nil {
				break
			}
		}
	}
	return fmt.Errorf("no symbol, and %s has no access pattern this decoder knows", fn)
}

// vmExecByDisassembly finds rb_vm_exec through rb_iseq_eval and
// rb_iseq_eval_main, exported functions that both end in a tail call to it
// (vm_exec). Both must agree.
func (b *Binary) vmExecByDisassembly(dst *Anchor) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return errors.New("no symbol, and the disassembly fallback supports x86_64 only")
	}
	var target uint64
	for _, fn := range []string{"rb_iseq_eval", "rb_iseq_eval_main"} {
		pc, code, err := b.funcBytes(fn, 2048)
		if err != nil {
			return fmt.Errorf("no symbol; disassembly: %w", err)
		}
		end := pc + uint64(len(code))
		var found []uint64
		for off := 0; off < len(code); {
			in, err := x86asm.Decode(code[off:], 64)
			if err != nil || in.Len == 0 {
				off++
				continue
			}
			i := insn{pc + uint64(off), in}
			if t, ok := i.branchTarget(); ok && in.Op == x86asm.JMP && (t < pc || t >= end) {
				found = append(found, t)
			}
			off += in.Len
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
		dst.How += ", size from .eh_frame_hdr"
	}
	return nil
}

// vmPtrByDisassembly finds ruby_current_vm_ptr through rb_during_gc, which
// loads it (directly, or through a GOT slot) and then the VM's objspace; the
// objspace offset must be the Layout's.
func (b *Binary) vmPtrByDisassembly(dst *Anchor, l *Layout) error {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return errors.New("no symbol, and the disassembly fallback supports x86_64 only")
	}
	const fn = "rb_during_gc"
	pc, code, err := b.funcBytes(fn, 64)
	if err != nil {
		return fmt.Errorf("no symbol; disassembly: %w", err)
	}
	insns := decode(pc, code)
	if len(insns) < 3 || insns[0].inst.Op != x86asm.MOV {
		return fmt.Errorf("no symbol, and %s does not start with a load", fn)
	}
	reg, _ := insns[0].inst.Args[0].(x86asm.Reg)
	t, ok := insns[0].ripTarget(insns[0].inst.Args[1])
	if !ok || reg == 0 {
		return fmt.Errorf("no symbol, and %s does not start with a RIP-relative load", fn)
	}
	rest := insns[1:]
	how := "disassembly of " + fn
	if m, ok := rest[0].inst.Args[1].(x86asm.Mem); ok && rest[0].inst.Op == x86asm.MOV && m.Base == reg && m.Disp == 0 && m.Index == 0 {
		// t is a GOT slot holding &ruby_current_vm_ptr.
		r, ok := b.relocationAt(t)
		switch {
		case ok && r.typ == uint32(elf.R_X86_64_RELATIVE):
			t = uint64(r.addend)
		case ok && r.typ == uint32(elf.R_X86_64_GLOB_DAT):
			v, ok := b.dynsymValue(r.sym)
			if !ok {
				return fmt.Errorf("no symbol; %s: bad GOT relocation", fn)
			}
			t = v
		default:
			return fmt.Errorf("no symbol; %s: GOT slot %#x has no usable relocation", fn, t)
		}
		rest = rest[1:]
		how += " (through the GOT)"
	}
	// Within the next instructions, the VM pointer is followed to objspace.
	for _, i := range rest {
		for _, a := range i.inst.Args {
			if m, ok := a.(x86asm.Mem); ok && m.Base == reg && m.Disp == l.VM.ObjSpace && l.VM.ObjSpace > 0 {
				*dst = Anchor{Name: dst.Name, Found: true, Address: t, Size: 8,
					How: fmt.Sprintf("%s (then vm->objspace at %d)", how, l.VM.ObjSpace)}
				return nil
			}
		}
	}
	return fmt.Errorf("no symbol, and %s does not read vm->objspace at %d", fn, l.VM.ObjSpace)
}

// shapeTreeByDisassembly finds rb_shape_tree_ptr through the exported
// rb_shape_get_shape_by_id, which loads it and, a few instructions on,
// follows it to shape_list (at the Layout's offset).
func (b *Binary) shapeTreeByDisassembly(dst *Anchor, l *Layout) error {
	const fn = "rb_shape_get_shape_by_id"
	pc, code, err := b.funcBytes(fn, 64)
	if err != nil {
		return fmt.Errorf("no symbol; disassembly: %w", err)
	}
	insns := decode(pc, code)
	for k, i := range insns {
		t, ok := i.ripTarget(i.inst.Args[1])
		reg, _ := i.inst.Args[0].(x86asm.Reg)
		if i.inst.Op != x86asm.MOV || !ok || reg == 0 {
			continue
		}
		for _, n := range insns[k+1 : min(k+5, len(insns))] {
			if m, ok := n.inst.Args[1].(x86asm.Mem); ok && n.inst.Op == x86asm.MOV && m.Base == reg && m.Disp == l.Shape.TreeShapeList {
				*dst = Anchor{Name: dst.Name, Found: true, Address: t, Size: 8,
					How: fmt.Sprintf("disassembly of %s (then shape_list at %d)", fn, l.Shape.TreeShapeList)}
				return nil
			}
		}
	}
	return fmt.Errorf("no symbol, and %s has no load this decoder knows", fn)
}
