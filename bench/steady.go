package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The slowdown runs work for a second or two, most of it while the
// recorder still names every frame it has not seen: their profiler CPU and
// wake-ups are a start-up's. A recording left on for minutes costs what
// the steady state does, measured here: rubyperf record and perf record
// at 999 Hz, alternated, on a run of the workload long enough to read the
// profiler's process from steadyFrom to steadyTo after the work began.
const (
	steadyFrom   = 3 * time.Second
	steadyTo     = 11 * time.Second
	steadyWork   = 30 * time.Second // planned, so that no run ends early: the work is ended at steadyTo
	steadyRounds = 3
)

// steadyTools are the profilers compared in the steady state.
var steadyTools = []tool{{name: "rubyperf", hz: 999}, {name: "perf", hz: 999}}

// steadyCell is one (depth, tool)'s rounds: the profiler's cores (its
// threads' time on a CPU, to the nanosecond) and voluntary context switches
// per second between steadyFrom and steadyTo.
type steadyCell struct {
	cpu, wakeups []float64
}

// steadyState runs each tool on each depth steadyRounds times, alternated.
func (b *bench) steadyState() (map[int]map[tool]*steadyCell, error) {
	cells := map[int]map[tool]*steadyCell{}
	rounds, from, to, work := b.steadyRounds(), steadyFrom, steadyTo, steadyWork
	if b.quick {
		from, to = time.Second, 3*time.Second
	}
	for _, depth := range b.depths {
		cells[depth] = map[tool]*steadyCell{}
		iterations := max(1, int(float64(b.iterations[depth])*work.Seconds()/b.workSeconds))
		for round := range rounds {
			for _, t := range steadyTools {
				cpu, wake, err := b.steadyRun(t, depth, iterations, from, to)
				if err != nil {
					return nil, fmt.Errorf("steady state, round %d, depth %d, %v: %w", round+1, depth, t, err)
				}
				c := cells[depth][t]
				if c == nil {
					c = &steadyCell{}
					cells[depth][t] = c
				}
				c.cpu, c.wakeups = append(c.cpu, cpu), append(c.wakeups, wake)
			}
		}
		b.logf("steady state: depth %d done (%s)", depth, time.Since(b.start).Round(time.Second))
	}
	return cells, nil
}

// steadyRounds is how many rounds steadyState runs.
func (b *bench) steadyRounds() int {
	if b.quick {
		return 1
	}
	return steadyRounds
}

// steadyRun runs the workload under t and reads the profiler's process at
// from and to after the work began: its cores and wake-ups per second.
func (b *bench) steadyRun(t tool, depth, iterations int, from, to time.Duration) (cpu, wakeups float64, err error) {
	out := filepath.Join(b.tmp, "steady.data")
	defer os.Remove(out)
	work := []string{b.ruby, b.workload, strconv.Itoa(depth), strconv.Itoa(iterations)}
	hz := strconv.Itoa(t.hz)
	var argv []string
	switch t.name {
	case "rubyperf":
		argv = append([]string{b.rubyperf, "record", "-F", hz, "-o", out, "--"}, work...)
	case "perf":
		argv = append([]string{"perf", "record", "-F", hz, "--call-graph", "dwarf", "-o", out, "--"}, work...)
	default:
		return 0, 0, fmt.Errorf("%v: not a profiler of its own", t)
	}
	var (
		wg          sync.WaitGroup
		first, last procSample
		readErr     error
	)
	_, err = runLines(nil, func(pid int, line string) {
		if line != "begin" {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(from)
			if first, readErr = sampleProc(pid); readErr != nil {
				return
			}
			time.Sleep(to - from)
			last, readErr = sampleProc(pid)
			// Enough: the workload (the profiler's child) goes, and the
			// profiler ends as its target's end makes it.
			for _, child := range children(pid) {
				syscall.Kill(child, syscall.SIGKILL)
			}
		}()
	}, argv...)
	wg.Wait()
	switch {
	case readErr != nil:
		return 0, 0, fmt.Errorf("the work ended before %s: %w", to, readErr)
	case first.at.IsZero() || last.at.IsZero():
		if err != nil {
			return 0, 0, err
		}
		return 0, 0, fmt.Errorf("the workload never printed begin")
	}
	// The profiler's exit status after its target was killed is not
	// checked: what was measured was read before.
	dt := last.at.Sub(first.at).Seconds()
	return (last.onCPU - first.onCPU).Seconds() / dt, float64(last.voluntary-first.voluntary) / dt, nil
}

// children are the pids of pid's children (/proc/PID/task/*/children).
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// steadyTable renders the steady state's cells.
func steadyTable(depths []int, cells map[int]map[tool]*steadyCell, rounds int) string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("**Steady state** (the profiler's own process from %s to %s after the work began, then the work is ended; median",
		steadyFrom, steadyTo)
	p("of %d alternated rounds, and their range): what a recording left on costs once its frames are named.", rounds)
	p("")
	p("| stack | profiler | profiler CPU (cores) | against perf | profiler wake-ups/s |")
	p("|---|---|---|---|---|")
	for _, depth := range depths {
		perf := cells[depth][tool{name: "perf", hz: 999}]
		for _, t := range steadyTools {
			c := cells[depth][t]
			if c == nil {
				continue
			}
			against := "–"
			if t.name != "perf" && perf != nil && median(perf.cpu) > 0 {
				against = fmt.Sprintf("%.2f×", median(c.cpu)/median(perf.cpu))
			}
			p("| %d frames | %v | %.4f [%.4f, %.4f] | %s | %.0f [%.0f, %.0f] |", depth, t,
				median(c.cpu), quantile(c.cpu, 0), quantile(c.cpu, 1), against,
				median(c.wakeups), quantile(c.wakeups, 0), quantile(c.wakeups, 1))
		}
	}
	return w.String()
}
