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
	bpf         []bpfRow
	postSamples int
	postBytes   int64
	post        []*postResult
	attachTable []float64
	attachDWARF []float64
	rss         []float64
	rssSamples  int
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
			rp := t.slow[depth][tool{"rubyperf", hz}]
			row := fmt.Sprintf("| %d frames | %d Hz |", depth, hz)
			for _, peer := range []string{"perf", "stackprof"} {
				pc := t.slow[depth][tool{peer, hz}]
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
	p("**BPF program run time per sample** (the kernel's BPF statistics, the user stack copy inside `bpf_perf_event_output` included (`--stack-size`, 8 KiB by default); `BenchmarkBPFRunTime`, 999 Hz; the median of 250 ms windows and the 10th–90th percentile window, because a shared machine's slow windows would swamp a mean; urgent: samples that woke the recorder at once; goal ≤ 5 µs at 10 frames, ≤ 10 µs at 200):")
	p("")
	p("| Ruby stack | stack copy | frames read per sample | urgent samples | µs per sample [p10, p90] |")
	p("|---|---|---|---|---|")
	for _, r := range t.bpf {
		shape := fmt.Sprintf("%d, one method", r.depth)
		if r.shape == "distinct" {
			shape = fmt.Sprintf("%d, distinct methods and blocks", r.depth)
		}
		p("| %s | %s | %.0f | %.1f%% | %.1f [%.1f, %.1f] |", shape, stackSize(r.stack), r.framesPerSamp, 100*r.urgent,
			r.nsPerSample/1000, r.p10/1000, r.p90/1000)
	}
	p("")
	p("**Post-processing** one recording of %d samples (%.0f bytes/sample), %d runs each, interleaved (goal ≥ 5× `perf script`):",
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
