package recording

import (
	"math"
	"testing"
	"time"
)

// TestTrapFit: windows of a program whose traps cost 20 µs, each seeing
// what the program allocated in its armed time less its stalls, at rates
// that differ from window to window: the fitted cost is 20 µs, and then
// each window weighs what its cycle allocated. A window always on weighs
// 1; windows already weighed over the counter by time alone fit 0.
func TestTrapFit(t *testing.T) {
	const trap = 20e3 // ns
	var ws []allocWindowFacts
	for i, rate := range []float64{2e6, 10e6, 500e3, 5e6} { // objects a second, unwatched
		armed, cycle := 5*time.Millisecond, time.Duration(20+10*i)*time.Millisecond
		refills := float64(10 + 20*i)
		run := float64(armed) - refills*trap // what the program ran of the window
		objects := rate * run / 1e9
		counted := rate * (float64(cycle) - refills*trap) / 1e9
		ws = append(ws, allocWindowFacts{objects: objects, refills: refills, armed: armed, cycle: cycle, counted: counted})
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
