package merge

import "slices"

// State is what a sample's thread was doing, besides where: the answer to
// "why is it slow" that a stack alone does not give.
type State uint8

const (
	StateUnknown State = iota // the sample does not say (an older recording, a layout without it)
	StateRuby                 // running Ruby code (holding the GVL)
	StateC                    // running a C method or C code (with or without the GVL)
	StateGC                   // collecting garbage (holding the GVL)
	StateGVL                  // waiting for the GVL
	StateBlocked              // off the CPU: sleep, I/O, a lock, a queue (record --wall)
	// StateOffCPU: off the CPU, blocked or waiting for the GVL: the layout
	// (a built-in table) cannot tell which (record --wall).
	StateOffCPU
)

// States lists every known state, in the order reports show them.
var States = []State{StateRuby, StateC, StateGC, StateGVL, StateBlocked, StateOffCPU}

// String is the state's short name: a pprof label value, a folded stack's
// group.
func (s State) String() string {
	switch s {
	case StateRuby:
		return "ruby"
	case StateC:
		return "c"
	case StateGC:
		return "gc"
	case StateGVL:
		return "gvl"
	case StateBlocked:
		return "blocked"
	case StateOffCPU:
		return "off_cpu"
	}
	return "unknown"
}

// Description is the state as a person reads it.
func (s State) Description() string {
	switch s {
	case StateRuby:
		return "running Ruby"
	case StateC:
		return "running C"
	case StateGC:
		return "garbage collection"
	case StateGVL:
		return "waiting for the GVL"
	case StateBlocked:
		return "blocked (sleep, I/O, a lock)"
	case StateOffCPU:
		return "off the CPU (blocked or waiting for the GVL: a debug file tells which)"
	}
	return "unknown"
}

// Names of the pseudo-frames a state puts on a stack (KindState), in
// parentheses so that no Ruby or C name can be taken for one (perf-script
// text, which flame graph scripts cut at the first '(', shows them in
// brackets).
const (
	GCName      = "(garbage collection)"
	GVLWaitName = "(waiting for the GVL)"
	BlockedName = "(blocked)"
	OffCPUName  = "(off CPU)"
)

// PhaseName is the pseudo-frame of a GC phase ("marking"): "(marking)".
func PhaseName(phase string) string { return "(" + phase + ")" }

// AddStateFrames puts the pseudo-frames of st's state on it, right above
// (leaf side of) its innermost Ruby-level frame, so that in a flame graph
// the time of each state sits on the Ruby code it happened under:
// (garbage collection) and its phase, (waiting for the GVL), (blocked).
// Running states add none. Native frames above that Ruby frame stay above
// the pseudo-frames.
func AddStateFrames(st *Stack, phase string) {
	var names []string
	switch st.State {
	case StateGC:
		names = []string{GCName}
		if phase != "" {
			names = append(names, PhaseName(phase))
		}
	case StateGVL:
		names = []string{GVLWaitName}
	case StateBlocked:
		names = []string{BlockedName}
	case StateOffCPU:
		names = []string{OffCPUName}
	default:
		return
	}
	at := len(st.Frames) // no Ruby frame: on top of everything
	for i, f := range st.Frames {
		if f.Kind == KindRuby || f.Kind == KindCFunc {
			at = i
			break
		}
	}
	if at == len(st.Frames) {
		at = 0
	}
	// Leaf first: the phase, then (garbage collection), then the Ruby frame.
	for _, n := range names {
		st.Frames = slices.Insert(st.Frames, at, Frame{Kind: KindState, Name: n})
	}
}
