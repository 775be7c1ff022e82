package recording

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
)

// Allocations (record --alloc) are sampled at the refills of the targets'
// allocation caches, through uprobes. A uprobe costs a trap each time it
// is hit (1 to 2 µs on a bare machine, about 16 µs measured here under
// nested virtualization), and a Ruby allocating millions of objects a
// second refills tens of thousands of times a second: with the uprobes on
// all the time, testdata/ruby/alloc.rb ran 2.4 times slower here. So the
// uprobes are on in windows, and the gap after each keeps the refills seen
// (each a trap) within allocTrapBudget a second at the rate the windows
// saw. Gaps are drawn at random around their mean, so that windows do not
// fall in step with a periodic workload.
//
// Each window stands for its cycle: the time from the end of the window
// before to its own end. Once it has ended, its samples are weighed
// (allocWeighed) by what it stands for (allocWindowFacts.weight): the
// program's run over the cycle against its run in the window, the traps'
// stalls taken out of both. What a trap costs is fitted so that the
// weights add up to the allocation counter (rubystack's AllocatedObjects,
// read at each window's end) over the recent windows; without a counter,
// the traps are taken to cost nothing. Armed time runs from the attach's
// return to the window's end (an uprobe_multi link puts its breakpoints in
// before it returns; the window ends when its number is taken back, before
// the detach).
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
	// maxAllocWeight bounds a window's weight: a window that saw a single
	// refill of a few objects in a cycle of millions stands for no more.
	maxAllocWeight = 1 << 20
)

// allocCounter is a target's allocation counter at the last window's end,
// and its recent windows.
type allocCounter struct {
	n       uint64
	counted bool // n was read
	windows []allocWindowFacts
}

// watchAllocations arms and disarms the targets' refill uprobes in
// windows until ctx ends, weighing each window's samples when it ends,
// then disarms them, and closes done.
func (s *session) watchAllocations(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	defer s.armRefills(false, 0)
	var (
		window  = uint32(0)
		rate    float64 // refills a second while armed, smoothed over windows
		steady  = false // the uprobes stay on
		counts  = map[int]*allocCounter{}
		lastEnd = time.Now() // the last window's end: this cycle's start
		// The gap before this window: as drawn, and its draw's mean.
		drawn, expected time.Duration
	)
	s.weighWindow(0, counts, 0, 0, false) // the counters, as the first cycle starts
	for {
		window++
		on := s.armRefills(true, window)
		length := allocWindow
		if steady {
			length = allocSteady
		}
		ended := !sleepCtx(ctx, length)
		off := time.Now()
		if !steady || ended {
			// Off before the window is read: every refill it saw is
			// in it, and in the counters read next.
			off = s.armRefills(false, 0)
		}
		armed := off.Sub(on)
		// The window stands for its cycle with the gap's mean for the gap
		// drawn: where it landed in the gap must not weigh it. Weighed by
		// the gap it followed, a window landed late stood for more than
		// one landed early, and a program whose parts alternate faster
		// than the gaps (RDoc lexes a file, then parses it) had the part
		// that follows the one a window saw weigh more: RDoc's parser
		// 1-2 points over Ruby's count, its lexer under.
		cycle := max(armed, time.Since(lastEnd)-drawn+expected)
		lastEnd = time.Now()
		// A window the recording's end cut short says too little of its
		// cycle to be weighed by it (armed a few microseconds, it would
		// stand for a hundred thousand times what it saw).
		cut := ended && armed < length/2
		seen := s.weighWindow(window, counts, armed, cycle, cut)
		if s.opts.Live {
			s.sampler.DrainSoon() // the window's samples, their objects to be followed while young
		}
		if ended {
			return
		}
		r := float64(seen) / armed.Seconds()
		switch {
		case rate == 0:
			rate = r
		default:
			rate = 0.7*rate + 0.3*r
		}
		drawn, expected = 0, 0
		if r <= allocTrapBudget/2 && rate <= allocTrapBudget/2 {
			steady = true // few enough to see them all: the uprobes stay on
			continue
		}
		if steady {
			steady = false
			s.armRefills(false, 0)
		}
		mean := float64(armed) * max(0, rate/allocTrapBudget-1)
		drawn = min(allocMaxGap, time.Duration(mean*(0.5+rand.Float64())))
		expected = gapMean(time.Duration(mean), allocMaxGap)
		if !sleepCtx(ctx, drawn) {
			return // the gap saw nothing; its window was weighed
		}
	}
}

// gapMean is the mean of a gap drawn at random between half and one and
// a half times mean, and cut at most.
func gapMean(mean, most time.Duration) time.Duration {
	lo, hi, c := 0.5*float64(mean), 1.5*float64(mean), float64(most)
	switch {
	case c >= hi:
		return mean
	case c <= lo:
		return most
	}
	// Uniform on [lo, hi]: below c as drawn, c above.
	return time.Duration(((c*c-lo*lo)/2 + c*(hi-c)) / (hi - lo))
}

// weighWindow ends window n (0: none yet, only the counters are read):
// it reads each target's allocation counter and what the program saw of
// its refills in the window, weighs the window's samples (allocWeighed),
// and returns the refills seen, all targets together. The window was
// armed for armed of its cycle; cut: too short to be weighed by its own
// facts, its samples take the target's latest window's weight.
func (s *session) weighWindow(n uint32, counts map[int]*allocCounter, armed, cycle time.Duration, cut bool) (seen int) {
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
			c = &allocCounter{}
			counts[pid] = c
		}
		before := *c
		now, err := t.Reader.AllocatedObjects()
		c.n, c.counted = now, err == nil
		if n == 0 {
			continue
		}
		w, ok := s.sampler.AllocWindow(pid)
		if !ok || w.Window != n || w.Refills == 0 {
			continue
		}
		seen += int(w.Refills)
		if cut {
			s.allocWeighed(pid, n, s.latestAllocWeight(uint32(pid)))
			continue
		}
		s.sum.AllocBusy += w.Busy
		s.sum.AllocBusyRefills += uint64(w.Refills)
		facts := allocWindowFacts{objects: float64(w.Objects), refills: float64(w.Refills), busy: float64(w.Busy),
			armed: armed, cycle: cycle}
		trap := 0.0
		if c.counted && before.counted && now >= before.n {
			facts.counted = float64(now - before.n)
			if len(c.windows) >= maxTrapFitWindows {
				c.windows = append(c.windows[:0], c.windows[1:]...)
			}
			c.windows = append(c.windows, facts)
			trap = trapFit(c.windows)
			s.sum.AllocTrap = time.Duration(trap)
		}
		s.allocWeighed(pid, n, min(facts.weight(trap), maxAllocWeight))
	}
	// Samples whose slots no later refill told of: written without.
	s.flushAllocClasses(allocClassWait)
	return seen
}

// armRefills puts the uprobes on every target's refills, as window n, or
// ends the window and takes them off (in the background: bpf.Refills
// Disarm), and returns when the window started or ended. Attaching and
// detaching take milliseconds (a tenth of one usually, ten at times,
// measured here): not under the session's lock. The program counts a
// target's refills from when its window is numbered to when it is
// numbered 0, and that is when its time is taken: numbered before its
// uprobes were on, a window counted the refills of the attach's tail,
// and one ended after waiting for the session's lock those of the wait,
// untimed, and RDoc's weights added up to more than Ruby counted.
func (s *session) armRefills(on bool, n uint32) time.Time {
	type armed struct {
		pid int
		r   *bpf.Refills
	}
	var all []armed
	s.mu.Lock()
	at := time.Now()
	for pid, t := range s.targets {
		if t.refills == nil || s.gone[pid] {
			continue
		}
		if !on {
			t.Config.SetAllocWindow(0)
			s.sampler.Reconfigure(pid, t.Config)
		}
		all = append(all, armed{pid, t.refills})
	}
	s.mu.Unlock()
	var ready []int
	for _, a := range all {
		if !on {
			a.r.Disarm()
			continue
		}
		if err := a.r.Arm(); err != nil {
			if alive(a.pid) {
				s.mu.Lock()
				if !s.allocWarned {
					s.allocWarned = true
					s.event(fmt.Sprintf("--alloc: %v", err))
				}
				s.mu.Unlock()
			}
			continue
		}
		ready = append(ready, a.pid)
	}
	if !on || len(ready) == 0 {
		return at
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range ready {
		if t := s.targets[pid]; t != nil && !s.gone[pid] {
			t.Config.SetAllocWindow(n)
			s.sampler.Reconfigure(pid, t.Config)
		}
	}
	return time.Now()
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
			FreeSlots: r.FreeSlots.Offset, SlotSize: r.SlotSize.Offset, FreeList: -1}
		// The program reads an object's flags and klass as the first 16
		// bytes of its slot: where struct RBasic has them there.
		if b := t.Reader.Layout.Basic; site.HeadInPage && b.Flags == 0 && b.Klass == 8 {
			sites[i].FreeList = r.FreeList.Offset
		}
	}
	refills, err := s.sampler.Refills(t.PID, t.Process.Binary.File(), sites)
	if err == nil && !s.allocChecked {
		// Once now, so that a kernel without uprobe_multi links (before
		// Linux 6.6) is refused at the start, not in the first window.
		if err = refills.Arm(); err == nil {
			refills.Disarm()
		}
		s.allocChecked = err == nil
	}
	if err != nil {
		return nil, fmt.Errorf("--alloc: %w", err)
	}
	return refills, nil
}

// warmRefills finds, in the background, the refill sites of the Ruby that
// pid is becoming (record --alloc -- CMD) while it boots: the sweep of a
// build's code takes a few hundred milliseconds, which after the attach
// would leave that much of the program's start unwatched. The session's
// rubybuild.Cache keeps the sites for the attach. The returned stop waits
// for a sweep under way (the attach would otherwise start its own) and
// ends the tries to open the process.
func (s *session) warmRefills(pid int, opts rubybuild.OpenOptions) (stop func()) {
	if s.opts.Alloc == 0 || opts.Cache == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		timer := time.NewTimer(warmWait)
		defer timer.Stop()
		for end := time.Now().Add(warmFor); time.Now().Before(end); {
			p, err := rubystack.OpenProcess(pid, opts)
			if err == nil {
				if l, err := p.Binary.Layout(); err == nil {
					p.Binary.RefillSites(l) // kept in the Cache
				}
				p.Close()
				return
			}
			if !errors.Is(err, rubystack.ErrNotRuby) && !goneFromProc(err) {
				return // not a Ruby it can read: the attach says why
			}
			timer.Reset(warmWait)
			select {
			case <-done:
				return
			case <-timer.C:
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		<-finished
	})
}

// warmRefills tries to open the process every warmWait, for at most warmFor.
const (
	warmWait = 5 * time.Millisecond
	warmFor  = 10 * time.Second
)
