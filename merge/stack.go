package merge

// Kind says what a frame is.
type Kind uint8

const (
	KindRuby   Kind = iota + 1 // a Ruby method or block (iseq)
	KindCFunc                  // a Ruby method implemented in C (Integer#times)
	KindNative                 // a native function in user space (a C function of libruby, libc, ...)
	KindKernel                 // a kernel function
	KindState                  // a pseudo-frame for what the thread was doing: "(garbage collection)", "(blocked)"
	KindLabel                  // a pseudo-frame for a request label a profile is grouped by: "endpoint=users"
)

func (k Kind) String() string {
	switch k {
	case KindRuby:
		return "ruby"
	case KindCFunc:
		return "cfunc"
	case KindNative:
		return "native"
	case KindKernel:
		return "kernel"
	case KindState:
		return "state"
	case KindLabel:
		return "label"
	}
	return "unknown"
}

// Frame is one frame of a merged stack.
type Frame struct {
	Kind Kind
	// Name is what a person reads: "Foo#bar", "Integer#times", "rb_ary_each",
	// "do_syscall_64". Never empty: unknown frames are "[unknown]". Ruby
	// names never contain '(' (flame graph tools cut names there).
	Name string
	// File is the Ruby source path for Ruby frames, and the object file
	// (DSO path, "[kernel.kallsyms]") for native and kernel frames.
	File string
	Line int64 // Ruby source line; 0 when unknown or not Ruby

	// Native and kernel frames: the address, and where it falls.
	Addr      uint64
	SymOffset uint64 // Addr minus the symbol's start, when Name is a symbol
	MapStart  uint64 // the mapping holding Addr (0 for kernel frames)
	MapLimit  uint64
	MapOffset uint64 // file offset of MapStart
	BuildID   string // hex, of the object file, when known
}

// Stack is one sample, merged: Ruby and native frames of the same instant,
// leaf first.
type Stack struct {
	PID, TID int
	Comm     string // thread name
	Time     uint64 // ns, perf clock
	CPU      uint32
	Period   uint64 // ns of CPU time this sample stands for (of wall-clock time when OffCPU; objects when Alloc)
	// State is what the thread was doing; OffCPU, that the sample was taken
	// as it left a CPU (record --wall) and Period is the time it stayed off.
	State  State
	OffCPU bool
	// Alloc: an allocation sample (record --alloc), taken as the thread
	// refilled its allocation cache: Period is the objects it stands for,
	// AllocBytes the bytes of their slots.
	Alloc      bool
	AllocBytes uint64
	// Alive: an allocation sample's object was alive when the recording
	// ended, having survived a GC (record --alloc --live; a recording that
	// did not follow its objects has none); for a live consumer (the
	// agent), the sample stands for objects in use at the time it tells.
	Alive bool
	// Object is which object an allocation sample caught: a live consumer
	// matches it with what a recording that follows its objects says of
	// them (recording.LiveView).
	Object AllocObject
	// Labels are the request labels of the fiber sampled (ruby-profiler's
	// state), in the order the process keeps them.
	Labels []Label
	Frames []Frame
	// Fallback: the Ruby and native stacks could not be interleaved, so the
	// Ruby frames sit on top of the native ones.
	Fallback bool
	// Incomplete: native unwinding stopped early; the root frame says so
	// (IncompleteName).
	Incomplete bool
	// Truncated: the Ruby stack was deeper than one sample carries; the
	// stack ends at its outermost Ruby frame carried, under TruncatedName.
	Truncated bool
}

// Label is one request label of a sample: "request_id" = "r42".
type Label struct{ Key, Value string }

// ClassLabel is the label an allocation sample carries its object's class
// in: "object.class" = "String", "(T_IMEMO)" for an object Ruby code
// never sees.
const ClassLabel = "object.class"

// NoLabel is the value of a label a sample does not have.
const NoLabel = "[none]"

// LabelValue is the value of the sample's label key, or NoLabel.
func (s *Stack) LabelValue(key string) string {
	for _, l := range s.Labels {
		if l.Key == key {
			return l.Value
		}
	}
	return NoLabel
}

// GroupBy puts under the stack (its outermost frame) a frame naming the
// value of its label key, "key=value" ("key=[none]" without it): a flame
// graph of such stacks splits by that label at its root.
func GroupBy(s *Stack, key string) {
	s.Frames = append(s.Frames, Frame{Kind: KindLabel, Name: key + "=" + s.LabelValue(key)})
}

// AllocObject identifies an allocation sample's object within its process:
// the thread that allocated it, the window of sampling and the sample's
// place in it, and the object's slot.
type AllocObject struct {
	TID, Window, Seq uint32
	Slot             uint64
}
