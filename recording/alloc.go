package recording

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
)

// Allocations (record --alloc) are sampled at the refills of the targets'
// allocation caches, through uprobes. A uprobe costs a trap each time it
// is hit (1 to 2 µs on a bare machine, about 16 µs measured here under
// nested virtualization), and a Ruby allocating millions of objects a
// second refills tens of thousands of times a second: with the uprobes on
// all the time, testdata/ruby/alloc.rb ran 2.4 times slower here. So the
// uprobes are on in windows, and the gap after each keeps the refills seen
// (each a trap) within allocTrapBudget a second at the rate the windows
// saw. Each refill seen stands for the time not watched: its objects count
// cycle / armed times, armed being how long the uprobes were on (from the
// attach's return to the detach's call: an uprobe_multi link puts its
// breakpoints in before it returns and takes them out first thing) and
// cycle the time from one window to the next. Gaps are drawn at random
// around their mean, so that windows do not fall in step with a periodic
// workload: the shares of what allocates are then unbiased.
//
// The count is not: the traps slow the allocations they watch (here each
// refill took twice as long in a window), so a window sees fewer than its
// share of time. Where the layout says where the GC counts allocations
// (rubystack's AllocatedObjects), the count of each target is read at each
// window, and the scale corrected by the ratio of what the counter says
// was allocated to what the weights said, over the windows so far.
//
// A window's scale is set before its refills are seen, from the last
// window's times, the gap drawn for this one and the correction so far,
// so that the refills do not decide their own weight.
const (
	allocWindow = 5 * time.Millisecond
	// allocTrapBudget bounds the refills a second the uprobes see, all
	// targets together: 1% of a core at 10 µs a trap.
	allocTrapBudget = 1000
	// allocMaxGap bounds a gap: a workload that allocates in bursts is
	// still seen every few seconds.
	allocMaxGap = 2 * time.Second
	// allocSteady: when the refills stay well within the budget, the
	// uprobes stay on, and their rate is checked this often (a workload
	// that starts allocating more is watched all the time for at most that
	// long).
	allocSteady = 200 * time.Millisecond
)

// allocCount is what the windows of one target add up to, against its
// allocation counter. A window's time scale stands for the time from the
// end of the window before to its own end: the counter is read at each
// window's end, and the objects it counted since the last end are set
// against the window's objects times its time scale.
type allocCount struct {
	counter  uint64  // at the last window's end
	counted  bool    // counter was read
	actual   float64 // objects the counter counted over the windows so far
	weighted float64 // objects the time scales gave them
}

// correction is what the target's time scale is multiplied by: the
// counter's count over the time scales', once there is something to
// compare.
func (c *allocCount) correction() float64 {
	if c.weighted <= 0 || c.actual <= 0 {
		return 1
	}
	return max(0.1, min(10, c.actual/c.weighted))
}

// watchAllocations arms and disarms the targets' refill uprobes in
// windows until ctx ends, then disarms them, and closes done.
func (s *session) watchAllocations(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	defer s.armRefills(false, 0, nil)
	var (
		window  = uint32(0)
		gap     time.Duration // drawn for the next cycle
		between time.Duration // of the last cycle: from the detach's call to the next attach's return, less the gap
		armed   time.Duration // of the last window
		rate    float64       // refills a second while armed, smoothed over windows
		steady  = false       // the uprobes stay on
		counts  = map[int]*allocCount{}
		last    = map[int]bpf.AllocWindow{} // the last window's, by target
	)
	for {
		window++
		timeScale := 1.0
		if !steady && armed > 0 {
			timeScale = float64(armed+between+gap) / float64(armed)
		}
		scales := map[int]float64{-1: timeScale} // a target counted nothing yet: uncorrected
		for pid, c := range counts {
			scales[pid] = timeScale * c.correction()
		}
		before := time.Now()
		s.armRefills(true, window, scales)
		on := time.Now()
		length := allocWindow
		if steady {
			length = allocSteady
		}
		if !sleepCtx(ctx, length) {
			return
		}
		last = s.allocWindows(window)
		s.countAllocations(counts, last, timeScale)
		seen := 0
		for _, w := range last {
			seen += int(w.Refills)
		}
		if steady {
			armed = time.Since(before) // on since the last window
		} else {
			armed = time.Since(on)
		}
		r := float64(seen) / armed.Seconds()
		switch {
		case rate == 0:
			rate = r
		default:
			rate = 0.7*rate + 0.3*r
		}
		if r <= allocTrapBudget/2 && rate <= allocTrapBudget/2 {
			steady = true // few enough to see them all: the uprobes stay on
			continue
		}
		steady = false
		off := time.Now()
		s.armRefills(false, 0, nil)
		mean := float64(armed) * max(0, rate/allocTrapBudget-1)
		gap = min(allocMaxGap, time.Duration(mean*(0.5+rand.Float64())))
		if !sleepCtx(ctx, gap) {
			return
		}
		between = time.Since(off) - gap + on.Sub(before) // detaching, and the next attach (as this one took)
	}
}

// countAllocations reads each target's allocation counter at the end of a
// window, and adds to its allocCount what the counter counted since the
// last window's end and what the window's objects, at timeScale, say.
func (s *session) countAllocations(counts map[int]*allocCount, last map[int]bpf.AllocWindow, timeScale float64) {
	s.mu.Lock() // the readers are the recorder's
	defer s.mu.Unlock()
	for pid := range counts {
		if t := s.targets[pid]; t == nil || s.gone[pid] {
			delete(counts, pid)
		}
	}
	for pid, t := range s.targets {
		if t.refills == nil || s.gone[pid] {
			continue
		}
		c := counts[pid]
		if c == nil {
			c = &allocCount{}
			counts[pid] = c
		}
		n, err := t.Reader.AllocatedObjects()
		if err == nil && c.counted && n >= c.counter {
			c.actual += float64(n - c.counter)
			c.weighted += float64(last[pid].Objects) * timeScale
		}
		c.counter, c.counted = n, err == nil
	}
}

// allocWindows returns what the program saw of each target in window n.
func (s *session) allocWindows(n uint32) map[int]bpf.AllocWindow {
	s.mu.Lock()
	pids := make([]int, 0, len(s.targets))
	for pid, t := range s.targets {
		if t.refills != nil && !s.gone[pid] {
			pids = append(pids, pid)
		}
	}
	s.mu.Unlock()
	out := map[int]bpf.AllocWindow{}
	for _, pid := range pids {
		if w, ok := s.sampler.AllocWindow(pid); ok && w.Window == n {
			out[pid] = w
		}
	}
	return out
}

// armRefills puts the uprobes on every target's refills, as window n,
// each refill of pid standing for scales[pid] (scales[-1] when absent, or
// 1), or takes them off. Attaching and detaching take milliseconds: not under the
// session's lock.
func (s *session) armRefills(on bool, n uint32, scales map[int]float64) {
	type armed struct {
		pid int
		r   *bpf.Refills
	}
	var all []armed
	s.mu.Lock()
	for pid, t := range s.targets {
		if t.refills == nil || s.gone[pid] {
			continue
		}
		if on {
			scale, ok := scales[pid]
			if !ok {
				if scale, ok = scales[-1]; !ok {
					scale = 1
				}
			}
			t.Config.SetAllocScale(scale)
			t.Config.SetAllocWindow(n)
			if err := s.sampler.Reconfigure(pid, t.Config); err != nil {
				continue
			}
		}
		all = append(all, armed{pid, t.refills})
	}
	s.mu.Unlock()
	for _, a := range all {
		if !on {
			a.r.Disarm()
			continue
		}
		if err := a.r.Arm(); err != nil && alive(a.pid) {
			s.mu.Lock()
			if !s.allocWarned {
				s.allocWarned = true
				s.event(fmt.Sprintf("--alloc: %v", err))
			}
			s.mu.Unlock()
		}
	}
}

// sleepCtx sleeps for d, or until ctx ends: false then.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// refillsOf makes t's refill uprobes, not armed (watchAllocations arms
// them).
func (s *session) refillsOf(t *Target) (*bpf.Refills, error) {
	r, err := t.Process.Binary.RefillSites(t.Reader.Layout)
	if err != nil {
		return nil, fmt.Errorf("pid %d: --alloc: %w", t.PID, err)
	}
	sites := make([]bpf.Refill, len(r.Sites))
	for i, site := range r.Sites {
		sites[i] = bpf.Refill{FileOffset: site.FileOffset, PageRegister: site.Page,
			FreeSlots: r.FreeSlots.Offset, SlotSize: r.SlotSize.Offset}
	}
	refills, err := s.sampler.Refills(t.PID, t.Process.Binary.File(), sites)
	if err == nil && !s.allocChecked {
		// Once now, so that a kernel without uprobe_multi links (before
		// Linux 6.6) is refused at the start, not in the first window.
		if err = refills.Arm(); err == nil {
			err = refills.Disarm()
		}
		s.allocChecked = err == nil
	}
	if err != nil {
		return nil, fmt.Errorf("--alloc: %w", err)
	}
	return refills, nil
}
