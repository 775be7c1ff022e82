package native

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// DWARF register numbers on x86_64 (System V psABI, figure 3.36).
const (
	dwarfRSP = 7
	dwarfRBP = 6
	dwarfRA  = 16 // the return address column
	dwarfMax = 17
)

// perfToDWARF maps the registers of a sample taken with user register mask
// 0xff0fff (PERF_REG_X86_64: AX..SS, R8..R15, in bit order) to DWARF numbers.
var perfToDWARF = [20]int{
	0,                            // AX -> rax
	3,                            // BX -> rbx
	2,                            // CX -> rcx
	1,                            // DX -> rdx
	4,                            // SI -> rsi
	5,                            // DI -> rdi
	6,                            // BP -> rbp
	7,                            // SP -> rsp
	16,                           // IP -> return address column
	-1,                           // FLAGS
	-1,                           // CS
	-1,                           // SS
	8, 9, 10, 11, 12, 13, 14, 15, // R8..R15
}

// calleeSavedRegs keep their value across a call (rbx, rbp, r12-r15).
var calleeSavedRegs = [...]uint64{3, dwarfRBP, 12, 13, 14, 15}

func calleeSaved(reg uint64) bool {
	for _, r := range calleeSavedRegs {
		if r == reg {
			return true
		}
	}
	return false
}

// UserRegsMask is the register mask the unwinder expects.
const UserRegsMask = 0xff0fff

// MaxFrames bounds one unwind (perf's default perf_event_max_stack is 127).
const MaxFrames = 512

// Frame is an unwound native frame.
type Frame struct {
	PC      uint64  // the address: the sampled IP, then return addresses
	Mapping Mapping // where PC falls
	Object  *Object // the mapped file, nil if it could not be loaded
	VAddr   uint64  // PC as a virtual address of Object
	JIT     bool    // PC is in JIT code: executable memory no file backs
}

// Objects loads and caches object files by path.
type Objects struct {
	byPath map[string]*Object
	// Open, if set, loads a file the recording named (e.g. under a
	// container root); LoadObjectWith(path, Load) by default.
	Open func(path string) *Object
	// Load says where the default Open looks for debug files.
	Load LoadOptions
	// Refused, if set, is told once per path (as long as the cache has
	// room) why a file was not read because it is not a regular file: a
	// FIFO or device put where a mapped file was. Its frames go unnamed.
	Refused func(error)
}

// maxObjects bounds the cache.
const maxObjects = 4096

// Get returns the object for path.
func (c *Objects) Get(path string) *Object {
	if c.byPath == nil {
		c.byPath = map[string]*Object{}
	}
	if o, ok := c.byPath[path]; ok {
		return o
	}
	open := c.Open
	if open == nil {
		open = func(p string) *Object { return LoadObjectWith(p, c.Load) }
	}
	var o *Object
	if path == VDSOPath {
		o = vdsoObject()
	} else {
		o = open(path)
	}
	if len(c.byPath) < maxObjects {
		c.byPath[path] = o
		if c.Refused != nil && errors.Is(o.Err(), safefile.ErrNotRegular) {
			c.Refused(o.Err())
		}
	}
	return o
}

// Len returns how many objects the cache holds.
func (c *Objects) Len() int { return len(c.byPath) }

// Unwind walks a user stack: regs are the sample's user registers (mask
// UserRegsMask), stack the copy taken at regs' SP. It stops where the call
// frame information ends, the stack copy ends, or a rule it cannot follow
// appears; the frames it found are appended to dst, leaf first, and
// returned. JIT code (an anonymous executable mapping) is stepped over by
// its return address on the stack (see jitStep).
func Unwind(dst []Frame, regs []uint64, stack []byte, maps *Maps, objs *Objects) []Frame {
	if len(regs) != len(perfToDWARF) {
		return dst
	}
	var r [dwarfMax]uint64
	var known [dwarfMax]bool
	for i, d := range perfToDWARF {
		if d >= 0 {
			r[d], known[d] = regs[i], true
		}
	}
	sp0 := r[dwarfRSP]
	read := func(addr uint64) (uint64, bool) {
		if addr < sp0 || addr-sp0 > uint64(len(stack)) || addr-sp0+8 > uint64(len(stack)) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(stack[addr-sp0:]), true
	}
	out := dst
	pc := r[dwarfRA]
	exact := true // pc is where the thread was, not a return address
	for len(out)-len(dst) < MaxFrames && pc != 0 {
		f, ok := frameAt(pc, maps, objs)
		if !ok {
			break
		}
		out = append(out, f)
		if f.JIT {
			next, nextKnown, ok := jitStep(&r, &known, read, maps, objs)
			if !ok { // (a step always moves the stack pointer up)
				break
			}
			r, known = next, nextKnown
			pc = r[dwarfRA]
			continue
		}
		if f.Object == nil || f.Object.Err() != nil {
			break
		}
		// A return address points after its call: look up the call itself.
		lookup := f.VAddr
		if !exact {
			lookup--
		}
		exact = false
		if f.Object.signalFrame(lookup) {
			next, nextKnown, ok := signalStep(read, r[dwarfRSP])
			if !ok {
				break
			}
			r, known, exact = next, nextKnown, true
			pc = r[dwarfRA]
			continue
		}
		ctx := f.Object.frameAt(lookup)
		if ctx == nil {
			break
		}
		var cfa uint64
		ok = true
		switch {
		case ctx.CFA.Rule == frame.RuleCFA && ctx.CFA.Reg < dwarfMax && known[ctx.CFA.Reg]:
			cfa = uint64(int64(r[ctx.CFA.Reg]) + ctx.CFA.Offset)
		case ctx.CFA.Rule == frame.RuleExpression:
			// PLT stubs: the rule depends on the pc (rip is the sampled one
			// for the leaf, the return address above it).
			v, err := evalCFAExpression(ctx.CFA.Expression, &r, &known)
			if err != nil {
				ok = false
			}
			cfa = v
		default:
			ok = false
		}
		if !ok {
			break
		}
		var next [dwarfMax]uint64
		var nextKnown [dwarfMax]bool
		// Callee-saved registers keep their value unless a rule says otherwise.
		for _, reg := range calleeSavedRegs {
			next[reg], nextKnown[reg] = r[reg], known[reg]
		}
		ok = true
		for reg, rule := range ctx.Regs {
			if reg >= dwarfMax {
				continue
			}
			switch rule.Rule {
			case frame.RuleOffset:
				v, good := read(uint64(int64(cfa) + rule.Offset))
				next[reg], nextKnown[reg] = v, good
			case frame.RuleValOffset:
				next[reg], nextKnown[reg] = uint64(int64(cfa)+rule.Offset), true
			case frame.RuleRegister:
				if rule.Reg < dwarfMax {
					next[reg], nextKnown[reg] = r[rule.Reg], known[rule.Reg]
				}
			case frame.RuleSameVal:
				next[reg], nextKnown[reg] = r[reg], known[reg]
			case frame.RuleUndefined:
				if reg == ctx.RetAddrReg {
					ok = false // the outermost frame
					break
				}
				// delve gives DW_CFA_restore of a register the CIE has no
				// rule for this rule; the psABI's default for a
				// callee-saved register is its same value (kept above).
				if !calleeSaved(reg) {
					nextKnown[reg] = false
				}
			default:
				nextKnown[reg] = false
			}
		}
		if !ok || ctx.RetAddrReg >= dwarfMax || !nextKnown[ctx.RetAddrReg] {
			break
		}
		ra := next[ctx.RetAddrReg]
		if cfa <= r[dwarfRSP] && len(out)-len(dst) > 1 { // the stack must unwind upwards
			break
		}
		next[dwarfRSP], nextKnown[dwarfRSP] = cfa, true
		next[dwarfRA], nextKnown[dwarfRA] = ra, true
		r, known = next, nextKnown
		pc = ra
	}
	return out
}

// frameAt describes the frame at pc: its mapping, and the object mapped
// there. It is false when no mapping holds pc.
func frameAt(pc uint64, maps *Maps, objs *Objects) (Frame, bool) {
	m, ok := maps.Find(pc)
	if !ok {
		return Frame{}, false
	}
	f := Frame{PC: pc, Mapping: m, JIT: IsJITMapping(m)}
	if !f.JIT && (m.Path != "" && m.Path[0] == '/' || m.Path == VDSOPath) {
		f.Object = objs.Get(m.Path)
		f.VAddr = f.Object.VAddr(pc - m.Start + m.Offset)
	}
	return f, true
}

// FramesAt describes the frames of PCs found by another unwinder (the BPF
// program's walk over the unwind tables), leaf first, as Unwind describes
// its own: it appends them to dst up to the first PC no mapping holds.
func FramesAt(dst []Frame, pcs []uint64, maps *Maps, objs *Objects) []Frame {
	for _, pc := range pcs[:min(len(pcs), MaxFrames)] {
		f, ok := frameAt(pc, maps, objs)
		if !ok {
			break
		}
		dst = append(dst, f)
	}
	return dst
}

// signalFrame tells whether vaddr is in a signal frame's code: its CIE's
// augmentation has 'S' (glibc's __restore_rt).
func (o *Object) signalFrame(vaddr uint64) bool {
	fde := o.fde(vaddr)
	return fde != nil && fde.CIE != nil && strings.Contains(fde.CIE.Augmentation, "S")
}

// ucontextRegs are where struct ucontext's uc_mcontext.gregs keeps the
// callee-saved registers, by DWARF number (x86_64 Linux: REG_RBX 11, REG_RBP
// 10, REG_R12..R15 4..7), besides SP and PC (SignalFrameSP, SignalFramePC).
var ucontextRegs = [...][2]uint64{{3, 11}, {dwarfRBP, 10}, {12, 4}, {13, 5}, {14, 6}, {15, 7}}

// signalStep steps over a signal frame whose stack pointer is sp: the
// interrupted registers are in the ucontext the kernel saved there.
func signalStep(read func(uint64) (uint64, bool), sp uint64) (next [dwarfMax]uint64, known [dwarfMax]bool, ok bool) {
	var good bool
	if next[dwarfRSP], good = read(sp + SignalFrameSP); !good {
		return next, known, false
	}
	if next[dwarfRA], good = read(sp + SignalFramePC); !good {
		return next, known, false
	}
	known[dwarfRSP], known[dwarfRA] = true, true
	for _, g := range ucontextRegs {
		next[g[0]], known[g[0]] = read(sp + 40 + 8*g[1])
	}
	return next, known, true
}
