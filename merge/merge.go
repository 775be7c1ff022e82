package merge

// Native is a native frame offered to Merge.
type Native struct {
	Frame
	// VMEntry: the frame is rb_vm_exec, one entry into the Ruby VM.
	VMEntry bool
	// Interp: the frame is interpreter plumbing (vm_exec_core,
	// vm_call_cfunc_with_frame, ...), hidden unless Options.Interp.
	Interp bool
	// ThreadStart: nothing runs below this frame (_start, start_thread):
	// native unwinding reached the bottom of the thread.
	ThreadStart bool
}

// Ruby is a Ruby control frame offered to Merge, leaf first, as the
// sampler captured it.
type Ruby struct {
	Frame
	// Finish: VM_FRAME_FLAG_FINISH, the first frame pushed by a VM entry.
	Finish bool
	// Hidden: a control frame rb_profile_frames does not report (a dummy or
	// C block frame); it still delimits VM entries by Finish.
	Hidden bool
}

// Options tune merging.
type Options struct {
	Interp   bool // keep interpreter-internal native frames
	NoNative bool // Ruby frames only, like rbspy
}

// Merge interleaves the Ruby frames of a sample with its native frames, leaf
// first. Each rb_vm_exec frame is replaced by the Ruby frames its VM entry
// pushed: the run of control frames up to and including the next one
// flagged FINISH. Native frames between two VM entries (a C method's
// implementation, rb_yield, ...) stay where they are, inside the C method
// frame that sits on top of the outer entry's frames.
//
// When native unwinding stopped early, the Ruby frames of the entries it did
// not reach go last (at the root). When it reached the thread's start, Ruby
// frames left over (Ruby 3.1's placeholder <main>, for one) go right below
// the outermost VM entry's frames. When the native stack has more VM entries
// than the Ruby stack, nothing is guessed: the Ruby frames go on top of the
// native frames and fallback is true.
func Merge(natives []Native, rubies []Ruby, opts Options) (frames []Frame, fallback bool) {
	var segments [][]Frame
	var cur []Frame
	for _, r := range rubies {
		if !r.Hidden {
			cur = append(cur, r.Frame)
		}
		if r.Finish {
			segments = append(segments, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		segments = append(segments, cur)
	}
	if opts.NoNative {
		for _, s := range segments {
			frames = append(frames, s...)
		}
		return frames, false
	}
	entries := 0
	for _, n := range natives {
		if n.VMEntry {
			entries++
		}
	}
	keep := func(n Native) bool { return opts.Interp || !n.Interp }
	if entries > len(segments) {
		for _, s := range segments {
			frames = append(frames, s...)
		}
		for _, n := range natives {
			if keep(n) && !n.VMEntry {
				frames = append(frames, n.Frame)
			}
		}
		return frames, true
	}
	si, afterLast, reachedStart := 0, -1, false
	for _, n := range natives {
		if n.VMEntry {
			frames = append(frames, segments[si]...)
			si++
			afterLast = len(frames)
			if opts.Interp {
				frames = append(frames, n.Frame)
			}
			continue
		}
		reachedStart = reachedStart || n.ThreadStart
		if keep(n) {
			frames = append(frames, n.Frame)
		}
	}
	var rest []Frame
	for ; si < len(segments); si++ {
		rest = append(rest, segments[si]...)
	}
	if len(rest) > 0 && reachedStart && afterLast >= 0 {
		out := append(append(append([]Frame{}, frames[:afterLast]...), rest...), frames[afterLast:]...)
		return out, false
	}
	return append(frames, rest...), false
}
