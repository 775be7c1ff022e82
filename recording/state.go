package recording

import (
	"strings"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/merge"
)

// threadState decides what a sample's thread was doing from what the
// program read (f) and whether its innermost Ruby-level frame is a C
// method (topC). A fact the layout could not read is not used; what is
// known is never guessed past:
//   - In a blocking region (unblock.func set) the thread has released the
//     GVL: it is blocked when it left the CPU for it, else running C.
//   - A GC runs on the thread that holds the GVL, and only there: a thread
//     running C without the GVL while another collects is not collecting.
//   - Holding the GVL, it runs Ruby or C by its innermost frame.
//   - Not holding it and not in a blocking region, it waits for it.
//   - Where the layout has no GVL owner, the thread that last took the GVL
//     (running_ec) stands for it on the CPU, never off it: a thread keeps
//     that title after releasing the GVL.
//
// Without unblock.func (a layout from a built-in table) a thread that left
// the CPU in a C method is called blocked, and one that did so in Ruby
// code without the GVL waiting for it.
func threadState(f bpf.ThreadFacts, topC bool) merge.State {
	running := merge.StateRuby
	if topC {
		running = merge.StateC
	}
	blocked := f.OffCPU && !f.Preempted
	if f.GVLLast && f.OffCPU {
		// The last to take the GVL, which a thread stays after releasing
		// it to yield, sleep or wait: no answer for a thread off the CPU.
		f.GVLKnown = false
	}
	switch {
	case f.RegionKnown && f.InRegion:
		if blocked {
			return merge.StateBlocked
		}
		return merge.StateC
	case f.GVLKnown && f.GVLHeld && f.GCRunning:
		return merge.StateGC
	case f.GVLKnown && f.GVLHeld:
		if blocked {
			return merge.StateBlocked // blocked without releasing the GVL
		}
		return running
	case f.GVLKnown && f.RegionKnown:
		return merge.StateGVL
	case f.GVLKnown:
		switch {
		case blocked && topC:
			return merge.StateBlocked
		case topC && !f.OffCPU:
			return merge.StateC
		}
		return merge.StateGVL
	case blocked:
		return merge.StateBlocked
	}
	return merge.StateUnknown
}

// tracingFrame: the kernel frames of the program that took an off-CPU
// sample, at its leaf (it runs in the scheduler's sched_switch
// tracepoint): not what the thread was doing.
func tracingFrame(name string) bool {
	return strings.HasPrefix(name, "bpf_prog_") || strings.HasPrefix(name, "bpf_trace_run") ||
		strings.HasPrefix(name, "__bpf_trace_") || strings.HasPrefix(name, "__traceiter_") ||
		strings.HasPrefix(name, "trace_call_bpf")
}
