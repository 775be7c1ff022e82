package merge

import "github.com/rubyperf/rubyperf/rubystack"

// Native is a native frame offered to Merge.
type Native struct {
	Frame
	// VMEntry: the frame is rb_vm_exec, one entry into the Ruby VM.
	VMEntry bool
	// Plumbing: the frame is a known piece of the interpreter's dispatch
	// (vm_exec_core, vm_call_cfunc_with_frame, ...), shown only by
	// ViewNative.
	Plumbing bool
	// Interpreter: the frame runs code of the object that holds the Ruby
	// VM (libruby, or the ruby executable when it is linked statically).
	Interpreter bool
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

// IncompleteName is the root frame of a stack whose native unwinding
// stopped before the part the view shows was complete.
const IncompleteName = "[native unwind incomplete]"

// TruncatedName is the root frame of a stack whose Ruby frames were more
// than a sample carries (the outermost are missing, and so is every native
// frame below the outermost Ruby frame carried).
const TruncatedName = "[ruby stack truncated]"

// Truncate makes frames (leaf first) a truncated stack: cut below its
// outermost Ruby or C-method frame, under a TruncatedName root.
func Truncate(frames []Frame) []Frame {
	end := len(frames)
	for end > 0 && frames[end-1].Kind != KindRuby && frames[end-1].Kind != KindCFunc {
		end--
	}
	return append(frames[:end], Frame{Kind: KindNative, Name: TruncatedName})
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

// View is what a merged stack shows of its native frames.
type View uint8

const (
	// ViewRuby, the default, reads like the Ruby program: Ruby frames, the
	// C methods they call and the native code those C methods run. What the
	// interpreter does between two Ruby frames (rb_yield, rb_block_call,
	// vm_call_*, named or not) is folded into the frame that owns it, an
	// unnamed interpreter frame anywhere into its caller, and the native
	// frames below the outermost Ruby frame (main, the thread's start) are
	// left out. Native code of other objects (a C extension, libc) and the
	// kernel stays.
	ViewRuby View = iota
	// ViewNative shows every native frame, the interpreter's own and its
	// VM entries included.
	ViewNative
	// ViewRubyOnly shows Ruby and C method frames alone, like rbspy.
	ViewRubyOnly
)

// Options tune merging.
type Options struct {
	View View
}

// Outcome says how a stack was merged.
type Outcome struct {
	// Fallback: the native stack has more VM entries than the Ruby stack,
	// so nothing was interleaved: the Ruby frames sit on top of the native
	// ones.
	Fallback bool
	// Incomplete: native unwinding stopped before the view's part of the
	// stack was complete; the stack's root frame is IncompleteName.
	Incomplete bool
}

// Merge interleaves the Ruby frames of a sample with its native frames, leaf
// first. Each rb_vm_exec frame is replaced by the Ruby frames its VM entry
// pushed: the run of control frames up to and including the next one
// flagged FINISH. Native frames between two VM entries (a C method's
// implementation, rb_yield, ...) stay where they are, inside the C method
// frame that sits on top of the outer entry's frames, as far as the view
// shows them (View).
//
// A JIT frame belongs to the innermost Ruby method (iseq) frame of its VM
// entry: it goes right above that frame, below the C method frames the JIT
// code pushed (which own the native frames above the JIT frame), and is
// named after it when nothing else names it.
//
// When native unwinding stopped early, the Ruby frames of the entries it did
// not reach go last, under an IncompleteName root. When it reached the
// thread's start, Ruby frames left over (Ruby 3.1's placeholder <main>, for
// one) go right below the outermost VM entry's frames. When the native stack
// has more VM entries than the Ruby stack, nothing is guessed: the Ruby
// frames go on top of the native frames and the outcome says Fallback.
func Merge(natives []Native, rubies []Ruby, opts Options) ([]Frame, Outcome) {
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
func (m *Merger) Merge(natives []Native, rubies []Ruby, opts Options) (frames []Frame, how Outcome) {
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
	if opts.View == ViewRubyOnly {
		return append(frames, m.ruby...), how
	}
	entries, unwound, reachesStart := 0, false, false
	for _, n := range natives {
		if n.VMEntry {
			entries++
		}
		unwound = unwound || n.Kind != KindKernel
		reachesStart = reachesStart || n.ThreadStart
	}
	if entries > len(m.ends) {
		frames = append(frames, m.ruby...)
		for i := range natives {
			if n := &natives[i]; !n.VMEntry && (opts.View == ViewNative || !folded(n)) {
				frames = append(frames, n.Frame)
			}
		}
		how.Fallback = true
		// A native stack short of the thread's start is incomplete here
		// too: else one of folded frames alone, with no Ruby frame read
		// (a sample whose Ruby stack was lost), would show nothing at all.
		if unwound && !reachesStart {
			return withIncompleteRoot(frames, how)
		}
		return frames, how
	}
	// What the default view keeps of a native frame, by where it is: above
	// the innermost VM entry (the C method's own work, or what a Ruby
	// method's instructions called), between two entries (a C method
	// calling back into Ruby), or below the outermost one.
	keep := func(n *Native, si int) bool {
		switch {
		case opts.View == ViewNative:
			return true
		case folded(n):
			return false
		case si == 0 || len(m.ruby) == 0:
			return true
		case si < entries:
			return !n.Interpreter
		}
		return false // below the outermost Ruby frame
	}
	si, afterLast := 0, -1
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
			if opts.View == ViewNative {
				frames = append(frames, n.Frame)
			}
			continue
		}
		if keep(n, si) {
			frames = append(frames, n.Frame)
		}
	}
	// The entries native unwinding did not reach: the rest of m.ruby.
	var rest []Frame
	if si < len(m.ends) {
		rest = m.ruby[startOf(m.ends, si)+done:]
	}
	if len(rest) > 0 && reachesStart && afterLast >= 0 {
		m.outer = append(m.outer[:0], frames[afterLast:]...)
		frames = append(append(frames[:afterLast], rest...), m.outer...)
		return frames, how
	}
	frames = append(frames, rest...)
	// Incomplete where the view misses something: Ruby frames placed without
	// the native frames between them, or (showing every native frame, or
	// when there is no Ruby frame) a native stack that ends short of the
	// thread's start.
	// A sample with neither (no native frame, no Ruby frame read) is one
	// too: it shows as that root, not as an empty stack.
	if unwound && !reachesStart && (len(rest) > 0 || opts.View == ViewNative || len(m.ruby) == 0) || len(frames) == 0 {
		return withIncompleteRoot(frames, how)
	}
	return frames, how
}

// withIncompleteRoot ends frames with the IncompleteName root and marks how
// Incomplete.
func withIncompleteRoot(frames []Frame, how Outcome) ([]Frame, Outcome) {
	how.Incomplete = true
	return append(frames, Frame{Kind: KindNative, Name: IncompleteName}), how
}

// folded: the default view leaves n out wherever it is: known plumbing,
// or an interpreter frame no symbol names.
func folded(n *Native) bool {
	return n.Plumbing || n.Interpreter && n.Name == rubystack.UnknownLabel
}

// startOf is where segment i of ends starts.
func startOf(ends []int, i int) int {
	if i == 0 {
		return 0
	}
	return ends[i-1]
}
