package recording

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestTrapFit: windows of a program whose traps cost 20 µs, each seeing
// what the program allocated in its armed time less its stalls, at rates
// that differ from window to window: the fitted cost is 20 µs, and then
// each window weighs what its cycle allocated. A window always on weighs
// 1; windows already weighed over the counter by time alone fit 0. Each
// window's samples cost the program busy more, measured, 2 to 20 µs a
// refill as its stacks are shallow or deep: the fit is the fixed part.
func TestTrapFit(t *testing.T) {
	const trap = 20e3 // ns
	var ws []allocWindowFacts
	for i, rate := range []float64{2e6, 10e6, 500e3, 5e6} { // objects a second, unwatched
		armed, cycle := 5*time.Millisecond, time.Duration(20+10*i)*time.Millisecond
		refills := float64(10 + 20*i)
		busy := refills * float64(2000+6000*i)
		run := float64(armed) - refills*trap - busy // what the program ran of the window
		objects := rate * run / 1e9
		counted := rate * (float64(cycle) - refills*trap - busy) / 1e9
		ws = append(ws, allocWindowFacts{objects: objects, refills: refills, busy: busy, armed: armed, cycle: cycle, counted: counted})
	}
	got := trapFit(ws)
	if math.Abs(got-trap) > 1 {
		t.Fatalf("fitted a trap at %.0f ns, want %.0f", got, float64(trap))
	}
	for i, w := range ws {
		if est := w.objects * w.weight(got); math.Abs(est-w.counted) > 1e-6*w.counted {
			t.Errorf("window %d weighs %.0f objects, allocated %.0f", i, est, w.counted)
		}
	}
	on := allocWindowFacts{objects: 1000, refills: 100, armed: 200 * time.Millisecond, cycle: 200 * time.Millisecond}
	if w := on.weight(trap); w != 1 {
		t.Errorf("a window always on weighs %v, want 1", w)
	}
	over := []allocWindowFacts{{objects: 1000, refills: 10, armed: 5 * time.Millisecond, cycle: 50 * time.Millisecond, counted: 5000}}
	if got := trapFit(over); got != 0 {
		t.Errorf("windows weighed over the counter by time alone: trap %.0f ns, want 0", got)
	}
	if got := trapFit(nil); got != 0 {
		t.Errorf("no windows: trap %.0f ns, want 0", got)
	}
}

// TestGapMean: gapMean is the mean of the gaps watchAllocations draws, cut
// or not, against the mean of a million draws.
func TestGapMean(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ mean, most time.Duration }{
		{10 * time.Millisecond, allocMaxGap}, {2 * time.Second, allocMaxGap}, {1500 * time.Millisecond, allocMaxGap},
		{10 * time.Second, allocMaxGap}, {0, allocMaxGap},
	} {
		var sum float64
		const n = 1_000_000
		for range n {
			sum += float64(min(c.most, time.Duration(float64(c.mean)*(0.5+r.Float64()))))
		}
		got, want := float64(gapMean(c.mean, c.most)), sum/n
		if math.Abs(got-want) > 1e-3*want+1 {
			t.Errorf("gapMean(%v, %v) = %v, draws average %v", c.mean, c.most, time.Duration(got), time.Duration(want))
		}
	}
}
