package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// allocTools are the allocation profilers compared on bench/alloc.rb:
// rubyperf record --alloc from outside, and, inside the target, stackprof's
// object mode (a sample every allocation, and every 1000th) and
// memory_profiler (every allocation, with its class and place).
var allocTools = []tool{{name: "rubyperf", alloc: true}, {name: "stackprof-object", hz: 1},
	{name: "stackprof-object", hz: 1000}, {name: "memory_profiler"}}

// memoryProfilerShare is the part of the work memory_profiler runs (with an
// unprofiled run of the same part to compare with): it keeps a record of
// every object, 10 GB for the 24 million of the whole work.
const memoryProfilerShare = 20

// allocBench is the allocation benchmark's result.
type allocBench struct {
	rounds int       // of bench/alloc.rb's work
	rate   []float64 // objects allocated a second, unprofiled
	cells  map[tool]*slowdownCell
}

// allocRun runs bench/alloc.rb's rounds under t.
func (b *bench) allocRun(t tool, rounds int) (slowRun, error) {
	return b.runTarget(t, []string{b.ruby, filepath.Join(b.repo, "bench", "alloc.rb"), strconv.Itoa(rounds)})
}

// allocObjectsPerRound is what one round of bench/alloc.rb allocates.
const allocObjectsPerRound = 3000 + 2000 + 1000 + 500

// allocSlowdown measures the slowdown of bench/alloc.rb under allocTools,
// as slowdown does the workload's: its work calibrated to 2 s unprofiled
// (the windows of --alloc need more than a blink), b.rounds interleaved
// rounds, each run against the same round's unprofiled run.
func (b *bench) allocSlowdown() (*allocBench, error) {
	const probe = 1000
	var took []float64
	for range 3 {
		r, err := b.allocRun(tool{name: "unprofiled"}, probe)
		if err != nil {
			return nil, err
		}
		took = append(took, r.work.seconds)
	}
	seconds := 2.0
	if b.quick {
		seconds = 1
	}
	res := &allocBench{rounds: max(1, int(probe*seconds/median(took))), cells: map[tool]*slowdownCell{}}
	for _, t := range allocTools {
		res.cells[t] = &slowdownCell{}
	}
	base := tool{name: "unprofiled"}
	for round := range b.rounds {
		smallBase := tool{name: "unprofiled", hz: -1} // of the memory_profiler's share
		order := append([]tool{base, smallBase}, allocTools...)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		runs := map[tool]slowRun{}
		for _, t := range order {
			rounds := res.rounds
			if t.name == "memory_profiler" || t == smallBase {
				rounds = max(1, rounds/memoryProfilerShare)
			}
			r, err := b.allocRun(t, rounds)
			if err != nil {
				return nil, fmt.Errorf("alloc round %d, %v: %w", round+1, t, err)
			}
			runs[t] = r
		}
		bs := runs[base]
		res.rate = append(res.rate, float64(res.rounds*allocObjectsPerRound)/bs.work.seconds)
		for _, t := range allocTools {
			if t.name == "memory_profiler" {
				res.cells[t].add(runs[t], runs[smallBase])
				continue
			}
			res.cells[t].add(runs[t], bs)
		}
		b.logf("alloc: round %d of %d done (%s)", round+1, b.rounds, time.Since(b.start).Round(time.Second))
	}
	return res, nil
}

// String is the allocation benchmark's table.
func (a *allocBench) String() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("**Allocation profiling** (`bench/alloc.rb`: %d rounds of 6500 objects, %.1f million allocations a second unprofiled (median);", a.rounds, median(a.rate)/1e6)
	p("each run against the same round's unprofiled run; median, and the middle half of the rounds in brackets; samples: what")
	p("each profiler took a second of work; the profiler's CPU is its own process's, rubyperf's only; memory_profiler, which")
	p("keeps a record of every object, runs 1/%d of the work, against an unprofiled run of the same):", memoryProfilerShare)
	p("")
	p("| profiler | slowdown | target CPU | samples/s | profiler CPU (cores) |")
	p("|---|---|---|---|---|")
	for _, t := range allocTools {
		c := a.cells[t]
		cpu := "—"
		if t.name == "rubyperf" {
			cpu = fmt.Sprintf("%.3f", median(c.profilerCPU))
		}
		p("| %v | %s [%s, %s] | %s | %.0f | %s |", t, pct(median(c.ratio)), pct(quantile(c.ratio, 0.25)), pct(quantile(c.ratio, 0.75)),
			pct(median(c.cpuRatio)), median(c.rate), cpu)
	}
	return w.String()
}
