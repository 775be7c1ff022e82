package merge

import "github.com/rubyperf/rubyperf/rubystack"

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
	// JIT: the frame runs code a JIT compiled (YJIT, ZJIT), which belongs
	// to the innermost Ruby method frame of its VM entry.
	JIT bool
}

// JITName names a JIT frame no symbol names, followed by its method when
// that is known: "[JIT] Foo#bar", as YJIT's own perf map names its code.
const JITName = "[JIT]"

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
// A JIT frame belongs to the innermost Ruby method (iseq) frame of its VM
// entry: it goes right above that frame, below the C method frames the JIT
// code pushed (which own the native frames above the JIT frame), and is
// named after it when nothing else names it.
//
// When native unwinding stopped early, the Ruby frames of the entries it did
// not reach go last (at the root). When it reached the thread's start, Ruby
// frames left over (Ruby 3.1's placeholder <main>, for one) go right below
// the outermost VM entry's frames. When the native stack has more VM entries
// than the Ruby stack, nothing is guessed: the Ruby frames go on top of the
// native frames and fallback is true.
func Merge(natives []Native, rubies []Ruby, opts Options) (frames []Frame, fallback bool) {
	var m Merger
	return m.Merge(natives, rubies, opts)
}

// Merger merges as Merge does, reusing its buffers from one call to the
// next: the frames one call returns are valid until the next.
type Merger struct {
	ruby  []Frame // the visible Ruby frames, leaf first
	ends  []int   // segments: ruby[ends[i-1]:ends[i]] is VM entry i's frames
	out   []Frame
	outer []Frame
}

// Merge is Merge with m's buffers.
func (m *Merger) Merge(natives []Native, rubies []Ruby, opts Options) (frames []Frame, fallback bool) {
	m.ruby, m.ends = m.ruby[:0], m.ends[:0]
	for _, r := range rubies {
		if !r.Hidden {
			m.ruby = append(m.ruby, r.Frame)
		}
		if r.Finish {
			m.ends = append(m.ends, len(m.ruby))
		}
	}
	if last := 0; len(m.ruby) > 0 {
		if len(m.ends) > 0 {
			last = m.ends[len(m.ends)-1]
		}
		if len(m.ruby) > last {
			m.ends = append(m.ends, len(m.ruby)) // the frames after the last FINISH
		}
	}
	segment := func(i int) []Frame { return m.ruby[startOf(m.ends, i):m.ends[i]] }
	frames = m.out[:0]
	defer func() { m.out = frames[:0] }()
	if opts.NoNative {
		return append(frames, m.ruby...), false
	}
	entries := 0
	for _, n := range natives {
		if n.VMEntry {
			entries++
		}
	}
	keep := func(n *Native) bool { return opts.Interp || !n.Interp }
	if entries > len(m.ends) {
		frames = append(frames, m.ruby...)
		for i := range natives {
			if n := &natives[i]; keep(n) && !n.VMEntry {
				frames = append(frames, n.Frame)
			}
		}
		return frames, true
	}
	si, afterLast, reachedStart := 0, -1, false
	done := 0 // frames of segment si already placed (above a JIT frame)
	for i := range natives {
		n := &natives[i]
		if n.JIT && si < len(m.ends) && done == 0 {
			seg := segment(si)
			k := 0 // the C method frames the JIT code pushed, then its own method
			for k < len(seg) && seg[k].Kind == KindCFunc {
				k++
			}
			frames = append(frames, seg[:k]...)
			done = k
			f := n.Frame
			if f.Name == rubystack.UnknownLabel {
				f.Name = JITName
				if k < len(seg) && seg[k].Name != rubystack.UnknownLabel {
					f.Name = JITName + " " + seg[k].Name
				}
			}
			frames = append(frames, f)
			continue
		}
		if n.VMEntry {
			frames = append(frames, segment(si)[done:]...)
			si, done = si+1, 0
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
	// The entries native unwinding did not reach: the rest of m.ruby.
	var rest []Frame
	if si < len(m.ends) {
		rest = m.ruby[startOf(m.ends, si)+done:]
	}
	if len(rest) > 0 && reachedStart && afterLast >= 0 {
		m.outer = append(m.outer[:0], frames[afterLast:]...)
		frames = append(append(frames[:afterLast], rest...), m.outer...)
		return frames, false
	}
	return append(frames, rest...), false
}

// startOf is where segment i of ends starts.
func startOf(ends []int, i int) int {
	if i == 0 {
		return 0
	}
	return ends[i-1]
}
