package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A profiler configuration the target runs under.
type tool struct {
	name string // "unprofiled", "rubyperf", "perf", "stackprof"
	hz   int
	wall bool // rubyperf record --wall: threads also sampled as they leave a CPU
	// unwind is rubyperf record's --unwind ("": its default).
	unwind string
	// alloc: rubyperf record --alloc (no CPU samples); for
	// "stackprof-object", hz is its interval (a sample every hz objects).
	alloc bool
}

func (t tool) String() string {
	name := t.name
	if t.wall {
		name += " --wall"
	}
	if t.unwind != "" {
		name += " --unwind " + t.unwind
	}
	if t.alloc {
		name += " --alloc"
	}
	if t.name == "stackprof-object" {
		return fmt.Sprintf("stackprof :object, interval %d", t.hz)
	}
	if t.hz == 0 {
		return name
	}
	return fmt.Sprintf("%s %d Hz", name, t.hz)
}

// slowRun is one run of the workload under a tool.
type slowRun struct {
	work        workReport
	samples     int
	offCPU      int     // of samples, those taken as threads left a CPU (rubyperf --wall)
	bytes       int64   // the recording's size
	profilerCPU float64 // cores the profiler's own process used while the target worked
	wakeups     float64 // the profiler's voluntary context switches per second meanwhile
}

// workReport is the workload's own account of its work (bench/workload.rb).
type workReport struct {
	seconds, cpu           float64
	voluntary, involuntary int
	samples                int // stackprof's
}

// runWorkload runs the workload at depth under t.
func (b *bench) runWorkload(t tool, depth int) (slowRun, error) {
	return b.runTarget(t, []string{b.ruby, b.workload, strconv.Itoa(depth), strconv.Itoa(b.iterations[depth])})
}

// runTarget runs work, a command printing what workload.rb prints, under t.
// For a profiler that is a process of its own (rubyperf, perf), its CPU time
// and wake-ups are read when the work begins and when it ends, so start-up
// and shutdown are not counted as the cost of leaving it on.
func (b *bench) runTarget(t tool, work []string) (slowRun, error) {
	out := filepath.Join(b.tmp, "slowdown.data")
	os.Remove(out)
	hz := strconv.Itoa(t.hz)
	argv, env := work, []string(nil)
	switch t.name {
	case "rubyperf":
		argv = []string{b.rubyperf, "record", "-F", hz, "-o", out}
		if t.alloc {
			argv = []string{b.rubyperf, "record", "--alloc", "-o", out}
		}
		if t.wall {
			argv = append(argv, "--wall")
		}
		if t.unwind != "" {
			argv = append(argv, "--unwind", t.unwind)
		}
		argv = append(append(argv, "--"), work...)
	case "perf":
		argv = append([]string{"perf", "record", "-F", hz, "--call-graph", "dwarf", "-o", out, "--"}, work...)
	case "stackprof":
		env = []string{"BENCH_STACKPROF_HZ=" + hz}
	case "stackprof-object":
		env = []string{"BENCH_STACKPROF_OBJECT=" + hz}
	case "memory_profiler":
		env = []string{"BENCH_MEMORY_PROFILER=1"}
	}
	separate := t.name == "rubyperf" || t.name == "perf"
	var begin, end procSample
	res, err := runLines(env, func(pid int, line string) {
		if !separate {
			return
		}
		if line == "begin" {
			begin, _ = sampleProc(pid)
		} else if !begin.at.IsZero() && end.at.IsZero() {
			end, _ = sampleProc(pid)
		}
	}, argv...)
	if err != nil {
		return slowRun{}, err
	}
	r := slowRun{bytes: fileSize(out)}
	if r.work, err = parseWork(res.stdout); err != nil {
		return r, err
	}
	if separate && !begin.at.IsZero() && !end.at.IsZero() {
		dt := end.at.Sub(begin.at).Seconds()
		r.profilerCPU = (end.cpu - begin.cpu).Seconds() / dt
		r.wakeups = float64(end.voluntary-begin.voluntary) / dt
	}
	switch t.name {
	case "rubyperf":
		r.samples, r.offCPU, err = rubyperfSamples(res.stderr)
	case "perf":
		r.samples, err = perfSamples(res.stderr)
	case "stackprof", "stackprof-object", "memory_profiler":
		r.samples = r.work.samples
	}
	return r, err
}

// parseWork reads the workload's last line.
func parseWork(stdout string) (workReport, error) {
	var w workReport
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	if _, err := fmt.Sscanf(last, "%f %f %d %d %d", &w.seconds, &w.cpu, &w.voluntary, &w.involuntary, &w.samples); err != nil {
		return w, fmt.Errorf("workload printed %q: %v", last, err)
	}
	return w, nil
}

// calibrate picks each depth's iterations so an unprofiled run works for
// about b.workSeconds.
func (b *bench) calibrate() error {
	b.iterations = map[int]int{}
	for _, depth := range b.depths {
		const probe = 4000
		b.iterations[depth] = probe
		var took []float64
		for range 3 {
			r, err := b.runWorkload(tool{name: "unprofiled"}, depth)
			if err != nil {
				return err
			}
			took = append(took, r.work.seconds)
		}
		b.iterations[depth] = max(1, int(float64(probe)*b.workSeconds/median(took)))
	}
	return nil
}

// slowdownCell gathers one (tool, depth)'s rounds.
type slowdownCell struct {
	ratio, rate, preempted, profilerCPU, wakeups, bytesPerSample []float64
	// perKiloRate is each run's slowdown divided by the thousands of samples
	// per second it reached: tools that sample at different rates compare.
	perKiloRate []float64
	// offCPURate is the off-CPU samples per second among rate (--wall).
	offCPURate []float64
	// cpuRatio is the CPU time the target was charged for its work (the BPF
	// programs' time in its context included) over the unprofiled run's.
	cpuRatio []float64
}

// add records a run of a tool against the same round's unprofiled run.
func (c *slowdownCell) add(r, base slowRun) {
	c.ratio = append(c.ratio, r.work.seconds/base.work.seconds)
	rate := float64(r.samples) / r.work.seconds
	c.rate = append(c.rate, rate)
	if rate > 0 {
		c.perKiloRate = append(c.perKiloRate, 1+(r.work.seconds/base.work.seconds-1)/(rate/1000))
	}
	c.offCPURate = append(c.offCPURate, float64(r.offCPU)/r.work.seconds)
	if base.work.cpu > 0 {
		c.cpuRatio = append(c.cpuRatio, r.work.cpu/base.work.cpu)
	}
	c.preempted = append(c.preempted, float64(r.work.involuntary-base.work.involuntary)/r.work.seconds)
	c.profilerCPU = append(c.profilerCPU, r.profilerCPU)
	c.wakeups = append(c.wakeups, r.wakeups)
	if r.samples > 0 && r.bytes > 0 {
		c.bytesPerSample = append(c.bytesPerSample, float64(r.bytes)/float64(r.samples))
	}
}

// slowdown runs every tool at every depth b.rounds times, interleaved: each
// round runs every configuration once, in a new random order, and each run
// is compared with the same round's unprofiled run at the same depth.
func (b *bench) slowdown(tools []tool) (map[int]map[tool]*slowdownCell, error) {
	cells := map[int]map[tool]*slowdownCell{}
	for _, depth := range b.depths {
		cells[depth] = map[tool]*slowdownCell{}
		for _, t := range tools {
			cells[depth][t] = &slowdownCell{}
		}
	}
	base := tool{name: "unprofiled"}
	for round := range b.rounds {
		for _, depth := range b.depths {
			order := append([]tool{base}, tools...)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			runs := map[tool]slowRun{}
			for _, t := range order {
				r, err := b.runWorkload(t, depth)
				if err != nil {
					return nil, fmt.Errorf("round %d, depth %d, %v: %w", round+1, depth, t, err)
				}
				runs[t] = r
			}
			for _, t := range tools {
				cells[depth][t].add(runs[t], runs[base])
			}
		}
		b.logf("slowdown: round %d of %d done (%s)", round+1, b.rounds, time.Since(b.start).Round(time.Second))
	}
	return cells, nil
}

// switchRun is the switch-heavy target (bench/threads.rb) run under t.
func (b *bench) switchRun(t tool) (slowRun, error) {
	return b.runTarget(t, []string{b.ruby, b.threadsScript, strconv.Itoa(b.threadIterations)})
}

// switchHeavy measures the slowdown of bench/threads.rb (three threads
// sharing the GVL, handing it on every slice of work) under tools, as
// slowdown does the workload's: b.rounds interleaved rounds, each run
// against the same round's unprofiled run. It also returns each unprofiled
// run's context switches per second (all its threads').
func (b *bench) switchHeavy(tools []tool) (map[tool]*slowdownCell, []float64, error) {
	const probe = 30000
	b.threadIterations = probe
	var took []float64
	for range 3 {
		r, err := b.switchRun(tool{name: "unprofiled"})
		if err != nil {
			return nil, nil, err
		}
		took = append(took, r.work.seconds)
	}
	b.threadIterations = max(1, int(float64(probe)*b.workSeconds/median(took)))
	cells := map[tool]*slowdownCell{}
	for _, t := range tools {
		cells[t] = &slowdownCell{}
	}
	var switches []float64
	base := tool{name: "unprofiled"}
	for round := range b.rounds {
		order := append([]tool{base}, tools...)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		runs := map[tool]slowRun{}
		for _, t := range order {
			r, err := b.switchRun(t)
			if err != nil {
				return nil, nil, fmt.Errorf("switch-heavy round %d, %v: %w", round+1, t, err)
			}
			runs[t] = r
		}
		bs := runs[base]
		switches = append(switches, float64(bs.work.voluntary+bs.work.involuntary)/bs.work.seconds)
		for _, t := range tools {
			cells[t].add(runs[t], bs)
		}
	}
	b.logf("switch-heavy: %d iterations, %d rounds done (%s)", b.threadIterations, b.rounds, time.Since(b.start).Round(time.Second))
	return cells, switches, nil
}
