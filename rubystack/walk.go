package rubystack

import (
	"errors"
	"fmt"
)

// MaxFrames bounds one stack walk. A thread's VM stack is 1 MiB by default
// and a frame takes at least 56 bytes plus locals, so about 18,000 frames fit;
// deeper stacks are cut here and counted.
const MaxFrames = 1 << 15

// RawFrame is one control frame as a walker captures it, before
// symbolization: the same pointers the BPF walker copies.
type RawFrame struct {
	Iseq  uint64 // cfp->iseq; 0 for C frames
	PC    uint64 // cfp->pc
	CME   uint64 // the frame's method entry (rb_vm_frame_method_entry), or 0
	Flags uint64 // ep[0]: frame magic and flags
	CFunc bool   // a C method frame
	// JIT: the frame runs JIT code with a stale pc (top frame, cfp->jit_return set).
	JIT bool
	// Top: the frame is the thread's current one (ec->cfp), whose pc a JIT
	// may leave stale.
	Top bool
	// Unknown: the frame could not be read consistently (a racing writer or a moved object).
	Unknown bool
}

// maxWalkTries bounds the retries of a walk whose thread moved under it.
const maxWalkTries = 3

// Walk returns the frames of the execution context at ec, leaf first, as
// rb_profile_frames selects them: Ruby frames, and C-method frames; dummy
// and other C frames are skipped.
//
// A running thread can push and pop frames while they are read. The walk
// reads every control frame in one read, then checks that ec->cfp did not
// move while it followed their pointers, and tries again if it did. What is
// still inconsistent comes back as frames marked Unknown, and is counted.
func (r *Reader) Walk(ec uint64) ([]RawFrame, error) {
	var frames []RawFrame
	for try := 0; ; try++ {
		if try > 0 {
			r.mem.refresh() // a fresh look at the moving thread
		}
		cfp, err := r.direct.word(ec + uint64(r.Layout.ExecutionContext.CFP))
		if err != nil {
			return nil, err
		}
		frames, err = r.walk(ec)
		if errors.Is(err, errTorn) {
			frames, err = []RawFrame{r.unknown()}, nil
		}
		if err != nil {
			return nil, err
		}
		after, err := r.direct.word(ec + uint64(r.Layout.ExecutionContext.CFP))
		if err != nil {
			return nil, err
		}
		if after == cfp || try+1 == maxWalkTries {
			if after != cfp {
				r.Stats.Moved++
			}
			for _, f := range frames {
				if f.Unknown {
					r.Stats.UnknownFrames++ // only what is returned counts
				}
			}
			return frames, nil
		}
	}
}

func (r *Reader) walk(ec uint64) ([]RawFrame, error) {
	L := r.Layout
	w := func(off int64) (uint64, error) { return r.o.word(ec + uint64(off)) }
	vmStack, err := w(L.ExecutionContext.VMStack)
	if err != nil {
		return nil, fmt.Errorf("execution context %#x: %w", ec, err)
	}
	size, err := w(L.ExecutionContext.VMStackSize)
	if err != nil {
		return nil, err
	}
	cfp, err := w(L.ExecutionContext.CFP)
	if err != nil {
		return nil, err
	}
	if cfp == 0 || vmStack == 0 {
		return nil, nil // a thread being created: no frames yet
	}
	frameSize := uint64(L.ControlFrame.Size)
	if size > maxRead/8 {
		return nil, fmt.Errorf("%w: VM stack of %d words", errTorn, size)
	}
	end := vmStack + 8*size // RUBY_VM_END_CONTROL_FRAME
	if L.Capabilities.SkipDummyBottomFrame {
		end -= frameSize
	}
	if cfp < vmStack || cfp > end || (end-cfp)%frameSize != 0 {
		return nil, fmt.Errorf("%w: cfp %#x is not a frame of the VM stack [%#x, %#x)", errTorn, cfp, vmStack, end)
	}
	n := (end - cfp) / frameSize
	if n > MaxFrames {
		n = MaxFrames
		r.Stats.Truncated++
	}
	buf := make([]byte, n*frameSize) // every frame in one read
	if err := r.mem.ReadAt(buf, cfp); err != nil {
		return nil, err
	}
	cflag := uint64(L.Constants["VM_FRAME_FLAG_CFRAME"])
	out := make([]RawFrame, 0, n)
	for i := uint64(0); i < n; i++ {
		f := buf[i*frameSize:]
		rf := RawFrame{PC: le64(f[L.ControlFrame.PC:]), Iseq: le64(f[L.ControlFrame.Iseq:]), Top: i == 0}
		ep := le64(f[L.ControlFrame.EP:])
		if ep == 0 {
			out = append(out, r.unknown())
			continue
		}
		if rf.Flags, err = r.o.word(ep); err != nil {
			if !errors.Is(err, errTorn) {
				return nil, err
			}
			out = append(out, r.unknown())
			continue
		}
		ruby := rf.Flags&cflag == 0
		if ruby && L.Capabilities.SkipDummyBottomFrame && rf.PC == 0 {
			continue
		}
		cme, err := r.frameMethodEntry(ep)
		if err != nil {
			if !errors.Is(err, errTorn) {
				return nil, err
			}
			out = append(out, r.unknown())
			continue
		}
		if ruby {
			rf.CME = cme
			if i == 0 && L.Capabilities.TopJITFrameLineZero && le64(f[L.ControlFrame.JITReturn:]) != 0 {
				rf.JIT = true
			}
			out = append(out, rf)
			continue
		}
		if !L.Capabilities.CFuncFrames || cme == 0 {
			continue
		}
		me, err := r.methodEntry(cme)
		if err != nil {
			if !errors.Is(err, errTorn) {
				return nil, err
			}
			out = append(out, r.unknown())
			continue
		}
		if me.defType == L.Constants["VM_METHOD_TYPE_CFUNC"] {
			out = append(out, RawFrame{CME: cme, Flags: rf.Flags, CFunc: true})
		}
	}
	return out, nil
}

func (r *Reader) unknown() RawFrame { return RawFrame{Unknown: true} }

// Frame is a symbolized frame, as rb_profile_frame_full_label, _path and
// the line of its pc give it.
type Frame struct {
	Label   string
	Path    string // "" with HasPath false for C methods
	HasPath bool
	Line    int64
	CFunc   bool
	Unknown bool
}

// UnknownLabel names a frame that could not be read.
const UnknownLabel = "[unknown]"

// Symbolize names a raw frame. A frame whose objects cannot be read
// consistently comes back Unknown, and is counted.
func (r *Reader) Symbolize(rf RawFrame) Frame {
	if rf.Unknown {
		return Frame{Label: UnknownLabel, Unknown: true} // counted by Walk
	}
	f, err := r.symbolize(rf)
	if err != nil {
		r.Stats.UnknownFrames++
		return Frame{Label: UnknownLabel, Unknown: true, CFunc: rf.CFunc}
	}
	return f
}

func (r *Reader) symbolize(rf RawFrame) (Frame, error) {
	L := r.Layout
	var me *methodEntry
	if rf.CME != 0 {
		var err error
		if me, err = r.methodEntry(rf.CME); err != nil {
			return Frame{}, err
		}
	}
	if rf.CFunc {
		name, err := r.syms.name(me.originalID)
		if err != nil {
			return Frame{}, err
		}
		label, err := r.qualify(me, name)
		return Frame{Label: label, CFunc: true}, err
	}
	// The frame's own iseq gives the line; the method's iseq (for a method
	// entry of an ISEQ method) gives the label and path.
	own, err := r.iseq(rf.Iseq)
	if err != nil {
		return Frame{}, err
	}
	// A JIT may point ec->cfp at a new frame before it writes the frame's
	// fields (YJIT 3.1 does, for a dozen instructions): the top frame then
	// holds what an earlier frame left in that slot. A method's frame is
	// whole only if its method entry runs the frame's own iseq; a torn one is
	// reported unknown rather than named after a method that is not running.
	if rf.Top && own.typ == L.Constants["ISEQ_TYPE_METHOD"] &&
		(me == nil || me.defType != L.Constants["VM_METHOD_TYPE_ISEQ"] || me.iseqPtr != rf.Iseq) {
		return Frame{}, fmt.Errorf("%w: top frame runs method iseq %#x without its method entry", errTorn, rf.Iseq)
	}
	// The same tear in a block's frame: one lexically in a method always
	// finds that method's entry up its environments, so a top block frame
	// without one would read as the bare "block in NAME" Ruby never says.
	if rf.Top && me == nil && own.typ == L.Constants["ISEQ_TYPE_BLOCK"] && own.local != rf.Iseq {
		if local, err := r.iseq(own.local); err == nil && local.typ == L.Constants["ISEQ_TYPE_METHOD"] {
			return Frame{}, fmt.Errorf("%w: top frame runs a block of method iseq %#x without its method entry", errTorn, own.local)
		}
	}
	labelled := own
	if me != nil && me.defType == L.Constants["VM_METHOD_TYPE_ISEQ"] {
		if labelled, err = r.iseq(me.iseqPtr); err != nil {
			return Frame{}, err
		}
	} else {
		me = nil // rb_profile_frames records the iseq itself
	}
	f := Frame{Path: labelled.path, HasPath: labelled.hasPath}
	stale := rf.Top && L.Capabilities.TopFramePCRangeCheck &&
		(rf.PC < own.encoded || rf.PC-own.encoded > 8*own.size)
	if !rf.JIT && !stale {
		if f.Line, err = r.line(own, rf.PC); err != nil {
			return Frame{}, err
		}
	}
	f.Label, err = r.fullLabel(labelled, me)
	return f, err
}

// fullLabel is rb_profile_frame_full_label for an iseq frame.
func (r *Reader) fullLabel(is *iseq, me *methodEntry) (string, error) {
	// rb_iseq_method_name: the base label of the local iseq, if a method.
	local, err := r.iseq(is.local)
	if err != nil {
		return "", err
	}
	if local.typ != r.Layout.Constants["ISEQ_TYPE_METHOD"] {
		return is.label, nil
	}
	var qualified string
	if me != nil {
		if qualified, err = r.qualify(me, local.baseLabel); err != nil {
			return "", err
		}
		if qualified == local.baseLabel && is.baseLabelValue == local.baseLabelValue {
			return is.label, nil // no class path: qualified is the base label VALUE itself
		}
	} else {
		if is.baseLabelValue == local.baseLabelValue {
			return is.label, nil
		}
		qualified = local.baseLabel
	}
	if len(is.baseLabel) > len(is.label) {
		return "", fmt.Errorf("%w: base label longer than label", errTorn)
	}
	return is.label[:len(is.label)-len(is.baseLabel)] + qualified, nil
}

// qualify prefixes a method name with its owner: "Foo#bar", "Foo.baz".
func (r *Reader) qualify(me *methodEntry, name string) (string, error) {
	path, singleton, err := r.methodOwner(me.definedClass)
	if err != nil || path == "" {
		return name, err
	}
	if singleton {
		return path + "." + name, nil
	}
	return path + "#" + name, nil
}
