package native

import (
	"debug/elf"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// Code a JIT compiler wrote (Ruby's YJIT and ZJIT, for one) lives in an
// anonymous executable mapping and has no call frame information. Such a
// frame is stepped over by finding its return address on the stack: the
// nearest slot above the frame's stack pointer that holds an address right
// after a call instruction in a mapped file whose call frame information
// covers that call. What a JIT pushes between its stack pointer and its
// return address are values it keeps (registers it saved, spilled
// temporaries), never code addresses after a call; a value that does not
// pass these checks is never taken for one, so a stack that cannot be
// stepped over ends there instead of going on wrong.
//
// A JIT that keeps a frame pointer (YJIT with --yjit-perf) has pushed the
// caller's rbp right below the return address and pointed rbp at it; one
// that does not leaves rbp as its caller had it. Registers the JIT saved for
// its caller (YJIT: rbx, r12, r13) are unknown after the step: the caller's
// own call frame information restores what it needs.

// maxJITScan bounds the slots searched above a JIT frame's stack pointer
// (YJIT pushes three registers and, around a call, the live ones).
const maxJITScan = 64

// IsJITMapping tells whether m is executable memory no file backs: code a
// JIT compiled.
func IsJITMapping(m Mapping) bool {
	return m.Exec && (m.Path == "" || m.Path == "//anon" || strings.HasPrefix(m.Path, "[anon"))
}

// jitStep steps over the JIT frame whose registers are r. It returns the
// caller's registers, or ok false when no return address passes.
func jitStep(r *[dwarfMax]uint64, known *[dwarfMax]bool, read func(uint64) (uint64, bool),
	maps *Maps, objs *Objects) (next [dwarfMax]uint64, nextKnown [dwarfMax]bool, ok bool) {
	if !known[dwarfRSP] {
		return next, nextKnown, false
	}
	sp := r[dwarfRSP]
	for i := uint64(0); i < maxJITScan; i++ {
		slot := sp + 8*i
		v, good := read(slot)
		if !good {
			break
		}
		if !isReturnAddress(v, maps, objs) {
			continue
		}
		next[dwarfRA], nextKnown[dwarfRA] = v, true
		next[dwarfRSP], nextKnown[dwarfRSP] = slot+8, true
		next[dwarfRBP], nextKnown[dwarfRBP] = r[dwarfRBP], known[dwarfRBP]
		if known[dwarfRBP] && r[dwarfRBP] == slot-8 && i > 0 {
			// A frame pointer: the caller's rbp is saved below the return address.
			next[dwarfRBP], nextKnown[dwarfRBP] = read(slot - 8)
		}
		return next, nextKnown, true
	}
	return next, nextKnown, false
}

// isReturnAddress tells whether addr is right after a call instruction in a
// mapped file whose call frame information covers the call.
func isReturnAddress(addr uint64, maps *Maps, objs *Objects) bool {
	m, ok := maps.Find(addr)
	if !ok || !m.Exec || m.Path == "" || m.Path[0] != '/' || IsJITMapping(m) {
		return false
	}
	o := objs.Get(m.Path)
	if o == nil || o.Err() != nil {
		return false
	}
	vaddr := o.VAddr(addr - m.Start + m.Offset)
	if vaddr == 0 || o.frameAt(vaddr-1) == nil {
		return false
	}
	return o.callEndsAt(vaddr)
}

// maxCallLen is the longest x86_64 call instruction looked for (ff /2 with a
// SIB byte, a 32-bit displacement and prefixes).
const maxCallLen = 15

// maxCallSites bounds an Object's cache of checked return addresses.
const maxCallSites = 1 << 14

// callEndsAt tells whether a call instruction ends right at vaddr, read from
// the file itself (cached per address).
func (o *Object) callEndsAt(vaddr uint64) bool {
	o.framesMu.Lock()
	v, seen := o.callSites[vaddr]
	o.framesMu.Unlock()
	if seen {
		return v
	}
	v = o.readCallEndsAt(vaddr)
	o.framesMu.Lock()
	if o.callSites == nil {
		o.callSites = make(map[uint64]bool)
	}
	if len(o.callSites) < maxCallSites {
		o.callSites[vaddr] = v
	}
	o.framesMu.Unlock()
	return v
}

func (o *Object) readCallEndsAt(vaddr uint64) bool {
	if o.Path == VDSOPath || vaddr < maxCallLen {
		return false
	}
	var seg *elf.Prog
	for _, p := range o.loads {
		if p.Flags&elf.PF_X != 0 && vaddr-maxCallLen >= p.Vaddr && vaddr <= p.Vaddr+p.Filesz {
			seg = p
			break
		}
	}
	if seg == nil {
		return false
	}
	f, err := safefile.Open(o.Path)
	if err != nil {
		return false
	}
	defer f.Close()
	var code [maxCallLen]byte
	if _, err := f.ReadAt(code[:], int64(vaddr-maxCallLen-seg.Vaddr+seg.Off)); err != nil {
		return false
	}
	return callEndsAt(code[:])
}

// callEndsAt tells whether some call instruction is exactly the end of code:
// a direct call (e8 rel32) or an indirect one (ff /2), with any prefixes.
func callEndsAt(code []byte) bool {
	for n := 2; n <= len(code); n++ {
		inst, err := x86asm.Decode(code[len(code)-n:], 64)
		if err == nil && inst.Len == n && inst.Op == x86asm.CALL {
			return true
		}
	}
	return false
}
