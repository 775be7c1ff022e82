package readback

import (
	"strings"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/payload"
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
// Without unblock.func and the GVL's owner (a layout from a built-in table)
// a thread that left the CPU is off it, blocked or waiting for the GVL,
// which is all that can be said.
func threadState(f payload.ThreadFacts, topC bool) merge.State {
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
	case blocked:
		// Off the CPU with no owner of the GVL to compare with, nor a
		// blocking region: blocked, or waiting for the GVL. A C method on
		// top does not tell (a thread hands the GVL on in one too).
		return merge.StateOffCPU
	case f.GVLKnown && topC:
		return merge.StateC // in a blocking region, or taking the GVL back
	case f.GVLKnown:
		return merge.StateGVL // Ruby code runs only with the GVL: taking it
	case f.OffCPU || f.GVLLast:
		return running // preempted: it was running
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
