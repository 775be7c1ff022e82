package rubybuild

import (
	"debug/elf"
	"errors"
	"fmt"
)

// The GC's during_gc bit for layouts that lack it. Built-in tables were
// generated before the Layout read flags.during_gc, so a stripped Ruby (the
// common case: distro packages) would get no GC phase. rb_during_gc, exported
// by every CRuby 3.1-4.0, returns exactly that bit:
//
//	3.1   mov GOT(%rip),%rax; mov (%rax),%rax     ruby_current_vm_ptr's value
//	      mov OBJSPACE(%rax),%rax                 vm->objspace
//	      movzbl FLAGS(%rax),%eax; shr $5,%al; and $1,%eax; ret
//	3.3   the same after endbr64, lea of the variable, and a NULL check that returns 0
//	3.4   the same through vm->gc.objspace (rb_gc_get_objspace and the default
//	      GC's rb_gc_impl_during_gc_p inlined)
//
// The evaluator follows the bits one by one, so the other shapes gcc and
// clang give it (a byte or 32-bit load, then shr and and on %eax) read the
// same, and a tail call into an out-of-line rb_gc_impl_during_gc_p is
// followed like the anchors' are. A build whose rb_during_gc goes through a
// call (a modular GC's function table, an out-of-line rb_gc_get_objspace) is
// not read: the bit is then not found, and the layout has no GC phase.

// duringGCFunc is the exported function whose code gives flags.during_gc.
const duringGCFunc = "rb_during_gc"

// findDuringGC reads flags.during_gc from rb_during_gc: the 32-bit flags word
// of the objspace (which must be the word of the Layout's flags.mode), and the
// bit in it the function returns. The objspace must be read through
// vm->objspace at the Layout's offset, and the bit must be apart from the
// Layout's mode and during_compacting bits.
func findDuringGC(env codeEnv, l *Layout) (Member, string, error) {
	mode, compacting := l.GC.Mode, l.GC.Compacting
	if l.VM.ObjSpace <= 0 || mode.Offset < 0 || mode.BitSize <= 0 {
		return Member{}, "", errors.New("the layout has no vm->objspace and flags.mode to check a disassembly with")
	}
	tr, err := traceCode(env, duringGCFunc)
	if err != nil {
		return Member{}, "", fmt.Errorf("%s: %w", duringGCFunc, err)
	}
	var word wordRef
	bit, found := 0, false
	for _, r := range tr.returns {
		if r.kind != vBits {
			return Member{}, "", fmt.Errorf("%s: returns a value this decoder cannot follow", duringGCFunc)
		}
		b, ok, zero := r.bits.singleBit()
		switch {
		case zero: // the path with no VM yet
			continue
		case !r.bits.hasWord:
			return Member{}, "", fmt.Errorf("%s: returns a value this decoder cannot follow", duringGCFunc)
		case !ok:
			return Member{}, "", fmt.Errorf("%s: returns no single bit of %s (other bits set or unknown)",
				duringGCFunc, wordName(r.bits.word))
		case found && (!word.same(r.bits.word) || b != bit):
			return Member{}, "", fmt.Errorf("%s: returns bit %d of %s and bit %d of %s", duringGCFunc,
				bit, wordName(word), b, wordName(r.bits.word))
		}
		word, bit, found = r.bits.word, b, true
	}
	if !found {
		return Member{}, "", fmt.Errorf("%s: returns no bit of a word read through a global's value", duringGCFunc)
	}
	read := fmt.Sprintf("bit %d of %s", bit, wordName(word))
	if word.base.field != l.VM.ObjSpace {
		return Member{}, "", fmt.Errorf("%s: returns %s, not through vm->objspace at %d", duringGCFunc, read, l.VM.ObjSpace)
	}
	if !env.isData(word.base.addr) {
		return Member{}, "", fmt.Errorf("%s: returns %s, but %#x is not in a data section", duringGCFunc, read, word.base.addr)
	}
	// A load at flags+k bytes holds the word's bits from 8k on.
	m := Member{Offset: mode.Offset, Size: mode.Size, BitOffset: 8*(word.disp-mode.Offset) + int64(bit), BitSize: 1}
	if m.Size <= 0 {
		m.Size = 4
	}
	switch {
	case m.BitOffset < 0 || m.BitOffset >= 32:
		return Member{}, "", fmt.Errorf("%s: returns %s, outside the 32-bit flags word at objspace+%d",
			duringGCFunc, read, mode.Offset)
	case overlapBits(m, mode):
		return Member{}, "", fmt.Errorf("%s: returns %s, a bit of flags.mode", duringGCFunc, read)
	case overlapBits(m, compacting):
		return Member{}, "", fmt.Errorf("%s: returns %s, the bit of flags.during_compacting", duringGCFunc, read)
	}
	how := fmt.Sprintf("disassembly of %s (%d-byte load at objspace+%d through global %#x, vm->objspace at %d)",
		duringGCFunc, word.bytes, word.disp, word.base.addr, l.VM.ObjSpace)
	return m, how, nil
}

// wordName names a word read through a field of a global's struct.
func wordName(w wordRef) string {
	return fmt.Sprintf("the %d-byte word at +%d of *(*%#x+%d)", w.bytes, w.disp, w.base.addr, w.base.field)
}

// overlapBits says whether two bit-fields of one word share a bit.
func overlapBits(a, b Member) bool {
	return a.BitOffset < b.BitOffset+b.BitSize && b.BitOffset < a.BitOffset+a.BitSize
}

// fillGCRunning completes a layout that lacks flags.during_gc (a built-in
// table) from this binary's rb_during_gc, and says on the layout how, or why
// not. It leaves a layout that has the bit as it is: DWARF's word stands.
func (b *Binary) fillGCRunning(l *Layout) {
	if l.GC.Running.BitSize > 0 {
		return
	}
	if b.elf.f.Machine != elf.EM_X86_64 {
		l.GC.RunningWhy = "not in the layout, and the disassembly of " + duringGCFunc + " supports x86_64 only"
		return
	}
	m, how, err := findDuringGC(newELFEnv(b), l)
	if err != nil {
		l.GC.RunningWhy = "not in the layout; " + err.Error()
		return
	}
	l.setGCRunning(m, how)
}

// setGCRunning puts a flags.during_gc found outside the layout's source into
// it: the member (in a copy of the structs, which a table shares with every
// layout made from it) and the GC phase it completes.
func (l *Layout) setGCRunning(m Member, how string) {
	structs := make(Structs, len(l.Structs))
	for name, sl := range l.Structs {
		structs[name] = sl
	}
	objspace := structs["rb_objspace"]
	members := make(map[string]Member, len(objspace.Members)+1)
	for name, mm := range objspace.Members {
		members[name] = mm
	}
	members["flags.during_gc"] = m
	structs["rb_objspace"] = StructLayout{Size: objspace.Size, Members: members}
	l.Structs = structs
	l.GC.Running, l.GC.RunningHow, l.GC.RunningWhy = m, how, ""
	l.Capabilities.GCPhase = l.hasGCPhase()
}

// gcRunningAnchor reports where the layout's flags.during_gc came from, as a
// line among the anchors (it is not a symbol): `rubyperf offsets` lists it
// with how it was found, or why not.
func gcRunningAnchor(l *Layout) Anchor {
	a := Anchor{Name: "flags.during_gc"}
	switch {
	case l == nil:
		a.Why = "no layout"
	case l.GC.Running.BitSize > 0:
		how := l.GC.RunningHow
		if how == "" {
			how = "layout " + l.Source
		}
		a.Found = true
		a.How = fmt.Sprintf("bit %d of objspace+%d, %s", l.GC.Running.BitOffset, l.GC.Running.Offset, how)
	case l.GC.RunningWhy != "":
		a.Why = l.GC.RunningWhy
	default:
		a.Why = "not in the layout"
	}
	return a
}
