package recording

import "time"

// A window's weight. A trap stalls the thread it catches, and with it the
// program (one thread runs Ruby at a time): a window of armed time armed
// that saw n refills ran the program for armed - stall, and stands for
// the program's run over its whole cycle (the gap before it, unwatched,
// and itself): cycle - stall. So each object its refills were seen to
// hand out stands for
//
//	(cycle - stall) / (armed - stall),  stall = n*trap + busy
//
// where busy is what the BPF program measured itself run for the window's
// refills (their samples' stack walks: more for a deep stack than a
// shallow one), and trap the rest of a refill's cost, the same at every
// refill (the breakpoint's exception, the kernel's uprobe dispatch, the
// step over the instruction). Fitting the whole cost as one constant
// left a deep part of a program under its share: RDoc's lexer, its
// stacks the deepest, read 1.5-4 points under Ruby's own count.
//
// A window always on (cycle = armed) stands for itself whatever the
// trap's cost. Weighing by time alone (trap 0) gives a part of a program
// that allocates fast less than its share: its windows are slowed more.
// Weighing each window by the allocation counter's count over its cycle
// divided among its refills does worse: each window then weighs about
// alike whatever it saw, so that the parts of a program weigh by the time
// they take, not by what they allocate (rdoc's lexer 3.5 points under
// Ruby's own count, its parser 3 over). The trap's cost is what makes the
// weights add up to the counter over the recent windows (trapFit).

// allocWindowFacts is what one window of one target saw.
type allocWindowFacts struct {
	objects      float64 // the objects its refills were seen to hand out
	refills      float64
	busy         float64 // ns the BPF program ran for them (bpf.AllocWindow.Busy)
	armed, cycle time.Duration
	counted      float64 // the allocation counter's count over its cycle
}

// maxTrapFitWindows bounds the windows trapFit weighs the cost over.
const maxTrapFitWindows = 256

// maxTrapShare bounds the share of a window's armed time its traps may
// be taken to have cost.
const maxTrapShare = 0.9

// weight is the window's weight at a trap cost of trap (ns).
func (w allocWindowFacts) weight(trap float64) float64 {
	stalled := w.refills*trap + w.busy
	run := float64(w.armed) - stalled
	if run < float64(w.armed)*(1-maxTrapShare) {
		run = float64(w.armed) * (1 - maxTrapShare)
	}
	if w.cycle <= w.armed || run <= 0 {
		return 1
	}
	return max(1, (float64(w.cycle)-stalled)/run)
}

// trapFit returns the trap cost (ns) at which the windows' objects,
// weighed, add up to what the counter counted over their cycles: 0 when
// time alone weighs them at or over it, and at most what leaves each
// window a tenth of its armed time.
func trapFit(ws []allocWindowFacts) float64 {
	var counted float64
	hi := -1.0
	for _, w := range ws {
		counted += w.counted
		if w.refills > 0 && w.armed > 0 {
			if c := max(0, maxTrapShare*float64(w.armed)-w.busy) / w.refills; hi < 0 || c < hi {
				hi = c
			}
		}
	}
	if hi <= 0 || counted <= 0 {
		return 0
	}
	estimate := func(trap float64) float64 {
		var sum float64
		for _, w := range ws {
			sum += w.objects * w.weight(trap)
		}
		return sum
	}
	if estimate(0) >= counted {
		return 0
	}
	if estimate(hi) <= counted {
		return hi
	}
	lo := 0.0
	for range 40 {
		mid := (lo + hi) / 2
		if estimate(mid) < counted {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}
