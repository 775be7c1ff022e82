package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// table is everything measured, rendered as Markdown.
type table struct {
	b           *bench
	tools       []tool
	slow        map[int]map[tool]*slowdownCell
	steady      map[int]map[tool]*steadyCell // the profilers once their frames are named
	switchTools []tool
	switchHeavy map[tool]*slowdownCell // bench/threads.rb under switchTools
	switchRate  []float64              // its context switches per second, unprofiled
	bpf         []bpfRow
	offCPU      []offCPURow
	postSamples int
	postBytes   int64
	post        []*postResult
	attachTable []float64
	attachDWARF []float64
	rss         []float64
	rssSamples  int
	shares      *shares // bench/app.rb: rubyperf's shares against stackprof's
	alloc       *allocBench
}

func (t *table) String() string {
	b := t.b
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	rubyVersion, _ := exec.Command(b.ruby, "-e", "print RUBY_VERSION").Output()
	p("Measured %s on %s; Ruby %s (%s); %d interleaved rounds; took %s.",
		time.Now().UTC().Format("2006-01-02"), machine(), rubyVersion, b.ruby, b.rounds, time.Since(b.start).Round(time.Second))
	p("")
	p("**Target slowdown** (the workload times its own work; each run against the same round's unprofiled run;")
	p("median, and the middle half of the rounds in brackets). The profiler's CPU and wake-ups are its own")
	p("process's while the target worked (start-up and shutdown left out); preemptions are the target's")
	p("involuntary context switches per second beyond the unprofiled run's. stackprof runs inside the target.")
	p("Per 1,000 samples/s: each run's slowdown divided by the thousands of samples per second it reached, so that")
	p("tools reaching different rates compare (stackprof's timer reaches about 250 per second when asked for 999).")
	p("")
	p("| stack | profiler | slowdown | samples/s reached | slowdown per 1,000 samples/s | profiler CPU (cores) | profiler wake-ups/s | target preemptions/s | bytes/sample |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, depth := range b.depths {
		for _, tl := range t.tools {
			c := t.slow[depth][tl]
			bps, cpu, wake := "–", "–", "–"
			if len(c.bytesPerSample) > 0 {
				bps = fmt.Sprintf("%.0f", median(c.bytesPerSample))
			}
			if tl.name != "stackprof" {
				cpu, wake = fmt.Sprintf("%.3f", median(c.profilerCPU)), fmt.Sprintf("%.0f", median(c.wakeups))
			}
			p("| %d frames | %v | %s [%s, %s] | %.0f | %s [%s, %s] | %s | %s | %.0f | %s |", depth, tl, pct(median(c.ratio)),
				pct(quantile(c.ratio, 0.25)), pct(quantile(c.ratio, 0.75)), median(c.rate),
				pct(median(c.perKiloRate)), pct(quantile(c.perKiloRate, 0.25)), pct(quantile(c.perKiloRate, 0.75)),
				cpu, wake, median(c.preempted), bps)
		}
	}
	p("")
	p("**Head to head**: in each round, the target's work time under rubyperf divided by its time under the peer at")
	p("the same rate (the round's noise falls on both); median and middle half of the rounds, and in how many rounds")
	p("the target ran faster under rubyperf.")
	p("")
	p("| stack | rate | vs perf | faster under rubyperf | vs stackprof | faster under rubyperf |")
	p("|---|---|---|---|---|---|")
	for _, depth := range b.depths {
		for _, hz := range []int{99, 999} {
			rp := t.slow[depth][tool{name: "rubyperf", hz: hz}]
			row := fmt.Sprintf("| %d frames | %d Hz |", depth, hz)
			for _, peer := range []string{"perf", "stackprof"} {
				pc := t.slow[depth][tool{name: peer, hz: hz}]
				if rp == nil || pc == nil {
					row += " – | – |"
					continue
				}
				rel, faster := headToHead(rp.ratio, pc.ratio)
				row += fmt.Sprintf(" %s [%s, %s] | %d of %d |", pct(median(rel)), pct(quantile(rel, 0.25)),
					pct(quantile(rel, 0.75)), faster, len(rel))
			}
			p("%s", row)
		}
	}
	p("")
	if t.steady != nil {
		w.WriteString(steadyTable(b.depths, t.steady, b.steadyRounds()))
		p("")
	}
	t.switchTables(p)
	p("")
	p("**BPF program run time per sample** (the kernel's BPF statistics, the user stack copy inside `bpf_perf_event_output` included (`--stack-size`, 8 KiB by default); `BenchmarkBPFRunTime`, 999 Hz; the median of 250 ms windows and the 10th–90th percentile window, because a shared machine's slow windows would swamp a mean; urgent: samples that woke the recorder at once; goal ≤ 5 µs at 10 frames, ≤ 10 µs at 200):")
	p("")
	p("| Ruby stack | stack copy | frames read per sample | urgent samples | µs per sample [p10, p90] |")
	p("|---|---|---|---|---|")
	for _, r := range t.bpf {
		if r.variant != "" || r.shape == "labels" {
			continue
		}
		p("| %s | %s | %.0f | %.1f%% | %.1f [%.1f, %.1f] |", r.stackName(), stackSize(r.stack), r.framesPerSamp, 100*r.urgent,
			r.nsPerSample/1000, r.p10/1000, r.p90/1000)
	}
	p("")
	t.abTable(p)
	t.offCPUTable(p)
	p("**Post-processing** one recording of %d samples (`--unwind copy`, which both unwind in user space: %.0f bytes/sample), %d runs each, interleaved (goal ≥ 5× `perf script`):",
		t.postSamples, float64(t.postBytes)/float64(max(1, t.postSamples)), b.postRounds)
	p("")
	p("| tool | samples/s | vs `perf script` | peak RSS |")
	p("|---|---|---|---|")
	var perfRate float64
	for _, r := range t.post {
		if strings.Contains(r.name, "perf script") && !strings.Contains(r.name, "rubyperf") {
			perfRate = median(r.samplesPerS)
		}
	}
	for _, r := range t.post {
		p("| %s | %.0f | %.2f× | %.0f MiB |", r.name, median(r.samplesPerS), median(r.samplesPerS)/perfRate, median(r.rssKiB)/1024)
	}
	p("")
	p("**Attach** (start of `record -p` to the output in place, the target's layout read and checked; %d runs, goal ≤ 300 ms on a DWARF libruby):", b.attachRounds)
	p("")
	p("| target | median | middle half |")
	p("|---|---|---|")
	p("| %s (stripped, built-in table) | %.0f ms | %s ms |", b.ruby, median(t.attachTable), spread(t.attachTable, "%.0f"))
	if len(t.attachDWARF) > 0 {
		p("| %s (libruby with DWARF) | %.0f ms | %s ms |", b.dwarfRuby, median(t.attachDWARF), spread(t.attachDWARF, "%.0f"))
	}
	p("")
	if len(t.rss) > 0 {
		p("**Recorder memory** over a %d s recording at 999 Hz (%d samples; the goal's 10 minutes shortened): resident %.1f MiB after 1 s, %.1f MiB at the end, %.1f MiB at most.",
			b.rssSeconds, t.rssSamples, t.rss[0]/1024, t.rss[len(t.rss)-1]/1024, quantile(t.rss, 1)/1024)
	}
	if t.alloc != nil {
		w.WriteString("\n")
		w.WriteString(t.alloc.String())
	}
	if t.shares != nil {
		p("")
		w.WriteString(t.shares.String())
	}
	return w.String()
}

// machine describes where the run happened: cores, CPU model, kernel.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d cores (%s), Linux %s", runtime.NumCPU(), model, strings.TrimSpace(string(kernel)))
}

func stackSize(n int) string {
	switch {
	case n == 0:
		return "none"
	case n%1024 == 0:
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

// headToHead pairs two tools' per-round slowdowns (the same rounds, in
// order) and returns, per round, the first's over the second's, and in how
// many rounds the first was the faster.
func headToHead(a, b []float64) (rel []float64, faster int) {
	for i := range min(len(a), len(b)) {
		rel = append(rel, a[i]/b[i])
		if a[i] < b[i] {
			faster++
		}
	}
	return rel, faster
}

// stackName describes the row's Ruby stack.
func (r bpfRow) stackName() string {
	switch r.shape {
	case "distinct":
		return fmt.Sprintf("%d, distinct methods and blocks", r.depth)
	case "labels":
		return fmt.Sprintf("`labels.rb`, fibers serving labelled requests (%.0f frames)", r.framesPerSamp)
	case "blocks":
		return fmt.Sprintf("`nativedeep.rb`, 60 levels re-entering the VM through blocks and C methods (%.0f frames)", r.framesPerSamp)
	}
	return fmt.Sprintf("%d, one method", r.depth)
}

// switchTables prints the switch-heavy target's slowdown and --wall
// against rubyperf without it, round by round.
func (t *table) switchTables(p func(string, ...any)) {
	b := t.b
	p("**Switch-heavy target slowdown** (`bench/threads.rb`: three threads sharing the GVL, each handing it on after every")
	p("slice of its share of the work, %.0f context switches/s unprofiled (median); %s takes a sample each time one of", median(t.switchRate), "`--wall`")
	p("them leaves a CPU. Its work time against the same round's unprofiled run, as above; %d rounds. One thread holds", b.rounds)
	p("the GVL at a time, so a sample's cost can fall on an idle CPU: target CPU is the CPU time the target was charged")
	p("for its work, the programs' time in its context included, against the unprofiled run's):")
	p("")
	p("| profiler | slowdown | target CPU | samples/s reached | of them off-CPU | slowdown per 1,000 samples/s | profiler CPU (cores) | profiler wake-ups/s | bytes/sample |")
	p("|---|---|---|---|---|---|---|---|---|")
	for _, tl := range t.switchTools {
		c := t.switchHeavy[tl]
		bps := "–"
		if len(c.bytesPerSample) > 0 {
			bps = fmt.Sprintf("%.0f", median(c.bytesPerSample))
		}
		p("| %v | %s [%s, %s] | %s [%s, %s] | %.0f | %.0f | %s [%s, %s] | %.3f | %.0f | %s |", tl, pct(median(c.ratio)),
			pct(quantile(c.ratio, 0.25)), pct(quantile(c.ratio, 0.75)), pct(median(c.cpuRatio)), pct(quantile(c.cpuRatio, 0.25)),
			pct(quantile(c.cpuRatio, 0.75)), median(c.rate), median(c.offCPURate),
			pct(median(c.perKiloRate)), pct(quantile(c.perKiloRate, 0.25)), pct(quantile(c.perKiloRate, 0.75)),
			median(c.profilerCPU), median(c.wakeups), bps)
	}
	p("")
	p("**`--wall` against without**: in each round, the target's work time under `rubyperf record --wall` divided by")
	p("its time under `rubyperf record` at the same rate; median and middle half of the rounds.")
	p("")
	p("| target | rate | --wall vs without | faster with --wall |")
	p("|---|---|---|---|")
	row := func(name string, wall, without *slowdownCell) {
		if wall == nil || without == nil {
			return
		}
		rel, faster := headToHead(wall.ratio, without.ratio)
		p("| %s | 99 Hz | %s [%s, %s] | %d of %d |", name, pct(median(rel)), pct(quantile(rel, 0.25)), pct(quantile(rel, 0.75)),
			faster, len(rel))
	}
	wall, without := tool{name: "rubyperf", hz: 99, wall: true}, tool{name: "rubyperf", hz: 99}
	for _, depth := range b.depths {
		row(fmt.Sprintf("`workload.rb`, %d frames", depth), t.slow[depth][wall], t.slow[depth][without])
	}
	row("`threads.rb`", t.switchHeavy[wall], t.switchHeavy[without])
}

// abTable prints the BPF A/B rows: each variant's windows beside its
// peer's, alternating in the same run.
func (t *table) abTable(p func(string, ...any)) {
	var rows []bpfRow
	for _, r := range t.bpf {
		if r.variant != "" && r.pairs > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	p("**A/B**: what one read of the sample costs, `BenchmarkBPFRunTime` as above (8 KiB stack copy, none for native unwinding), each run")
	p("alternating 250 ms windows with the read and without it (thread state: `EcThread` = 0; labels: `ReadLabels` or")
	p("not), so both share the run's noise: medians of each one's windows, and the median of the differences between")
	p("adjacent windows:")
	p("")
	p("| Ruby stack | read | µs per sample with it [p10, p90] | without it [p10, p90] | its cost: adjacent windows (medians) | pairs |")
	p("|---|---|---|---|---|---|")
	for _, r := range rows {
		// The variant is arm 0: with the read for labels, without it for
		// the thread's state.
		what, with, without, cost := "", [3]float64{r.nsPerSample, r.p10, r.p90}, [3]float64{r.peer, r.peerP10, r.peerP90}, r.diff
		switch r.variant {
		case "nothread":
			what = "the thread's state (its Ractor and `unblock.func`, the GVL owner)"
			with, without, cost = without, with, -cost
		case "labels":
			what = fmt.Sprintf("request labels (%.1f per labelled sample)", r.labels)
		case "native":
			what = fmt.Sprintf("native unwinding with the tables (%.0f native frames a sample; no stack copy)", r.natives)
		default:
			what = r.variant
		}
		p("| %s | %s | %.1f [%.1f, %.1f] | %.1f [%.1f, %.1f] | %+.2f µs (%s) | %.0f |", r.stackName(), what,
			with[0]/1000, with[1]/1000, with[2]/1000, without[0]/1000, without[1]/1000, without[2]/1000,
			cost/1000, pct(1+cost/without[0]), r.pairs)
	}
	p("")
}

// offCPUTable prints BenchmarkOffCPU beside its peer, the cpu-clock program.
func (t *table) offCPUTable(p func(string, ...any)) {
	if len(t.offCPU) == 0 {
		return
	}
	p("**Off-CPU program** (`--wall`: `tp_btf/sched_switch`, which runs on every context switch of the machine;")
	p("`BenchmarkOffCPU`: a target's threads followed and sampled at 999 Hz on `source-3.3-static`; medians of 250 ms")
	p("windows. Per off-CPU sample: the program's whole run time over the samples it took, then less its other runs at")
	p("the cost of a switch while no thread is followed. The peer, in the same run: `sample_ruby`'s time per cpu-clock sample):")
	p("")
	p("| target | context switches/s (machine) | off-CPU samples/s | µs per switch, no target [while sampling] | µs per off-CPU sample, every run [p10, p90] | less the other runs | `sample_ruby` µs per sample [p10, p90] | off-CPU sample vs peer |")
	p("|---|---|---|---|---|---|---|---|")
	for _, o := range t.offCPU {
		target := o.target
		switch o.target {
		case "gvl":
			target = "`states.rb gvl`: three threads handing the GVL on"
		case "pass":
			target = "three threads calling `Thread.pass` after every slice of work"
		}
		p("| %s | %.0f | %.0f | %.2f [%.2f] | %.1f [%.1f, %.1f] | %.1f | %.1f [%.1f, %.1f] | %.2f× |", target, o.switchR, o.offCPURate,
			o.idleNsPerRun/1000, o.nsPerRun/1000, o.nsPerSample/1000, o.p10/1000, o.p90/1000, o.samplingNs/1000,
			o.cpuNs/1000, o.cpuP10/1000, o.cpuP90/1000, o.samplingNs/o.cpuNs)
	}
	p("")
}
