package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// bench is one benchmark run's settings and scratch space.
type bench struct {
	repo, rubyperf, ruby, workload, depthScript, tmp string
	threadsScript                                    string // bench/threads.rb, the switch-heavy target
	depths                                           []int
	iterations                                       map[int]int
	threadIterations                                 int // threads.rb's work for about workSeconds
	workSeconds                                      float64
	rounds, postRounds, attachRounds                 int
	postSamples, rssSeconds                          int
	dwarfRuby                                        string // a Ruby whose libruby has DWARF, for attach time ("" to skip)
	start                                            time.Time
	quick                                            bool
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func main() {
	b := &bench{start: time.Now(), depths: []int{10, 200}}
	quick := flag.Bool("quick", false, "a short run to try the harness: 2 rounds, small recordings (not for docs/performance.md)")
	out := flag.String("o", "", "also write the table to this file")
	sharesOnly := flag.Bool("shares-only", false, "only compare rubyperf's shares with stackprof's on bench/app.rb")
	allocOnly := flag.Bool("alloc-only", false, "only the allocation profilers' slowdown on bench/alloc.rb")
	steadyOnly := flag.Bool("steady-only", false, "only the profilers' CPU and wake-ups in the steady state")
	flag.StringVar(&b.ruby, "ruby", "/usr/bin/ruby3.1", "the Ruby every tool profiles (stackprof must be installed for it)")
	flag.StringVar(&b.rubyperf, "rubyperf", "bin/rubyperf", "the rubyperf binary")
	flag.StringVar(&b.dwarfRuby, "dwarf-ruby", "", "a Ruby whose libruby carries DWARF, for the attach row")
	flag.IntVar(&b.rounds, "rounds", 10, "interleaved rounds of the slowdown runs")
	flag.Float64Var(&b.workSeconds, "work", 1.5, "seconds each unprofiled workload run works")
	flag.IntVar(&b.postSamples, "post-samples", 50000, "samples in the post-processing recording")
	flag.IntVar(&b.rssSeconds, "rss-seconds", 60, "length of the recording whose memory is followed")
	flag.Parse()
	b.quick = *quick
	if *quick {
		b.rounds, b.workSeconds, b.postSamples, b.rssSeconds = 2, 0.5, 4000, 5
	}
	b.postRounds, b.attachRounds = 3, 5
	if err := b.setup(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	defer os.RemoveAll(b.tmp)
	measure := b.measure
	if *sharesOnly {
		measure = b.measureShares
	}
	if *steadyOnly {
		measure = b.measureSteady
	}
	if *allocOnly {
		measure = func() (string, error) {
			a, err := b.allocSlowdown()
			if err != nil {
				return "", err
			}
			return a.String(), nil
		}
	}
	table, err := measure()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			os.Exit(1)
		}
	}
}

func (b *bench) setup() error {
	var err error
	if b.repo, err = os.Getwd(); err != nil {
		return err
	}
	if b.rubyperf, err = filepath.Abs(b.rubyperf); err != nil {
		return err
	}
	if _, err := os.Stat(b.rubyperf); err != nil {
		return fmt.Errorf("%s: %w (run make build first)", b.rubyperf, err)
	}
	b.workload = filepath.Join(b.repo, "bench", "workload.rb")
	b.depthScript = filepath.Join(b.repo, "testdata", "ruby", "depth.rb")
	b.threadsScript = filepath.Join(b.repo, "bench", "threads.rb")
	if out, err := exec.Command(b.ruby, "-rstackprof", "-e", "print StackProf::VERSION").CombinedOutput(); err != nil {
		return fmt.Errorf("%s has no stackprof (%s): install ruby-stackprof", b.ruby, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command(b.ruby, "-rmemory_profiler", "-e", "print MemoryProfiler::VERSION").CombinedOutput(); err != nil {
		return fmt.Errorf("%s has no memory_profiler (%s): install ruby-memory-profiler", b.ruby, strings.TrimSpace(string(out)))
	}
	if _, err := exec.LookPath("perf"); err != nil {
		return fmt.Errorf("perf: %w (install linux-perf)", err)
	}
	b.tmp, err = os.MkdirTemp("", "rubyperf-bench-")
	return err
}

// measure runs every part and returns the table.
func (b *bench) measure() (string, error) {
	t := &table{b: b}
	var err error
	if err = b.calibrate(); err != nil {
		return "", err
	}
	b.logf("calibrated: %v iterations per depth for %.1fs of work", b.iterations, b.workSeconds)
	tools := []tool{{name: "rubyperf", hz: 99}, {name: "rubyperf", hz: 99, wall: true}, {name: "perf", hz: 99},
		{name: "stackprof", hz: 99}, {name: "rubyperf", hz: 999}, {name: "rubyperf", hz: 999, unwind: "both"},
		{name: "perf", hz: 999}, {name: "stackprof", hz: 999}}
	if t.slow, err = b.slowdown(tools); err != nil {
		return "", err
	}
	if t.steady, err = b.steadyState(); err != nil {
		return "", err
	}
	t.tools = tools
	t.switchTools = []tool{{name: "rubyperf", hz: 99}, {name: "rubyperf", hz: 99, wall: true}}
	if t.switchHeavy, t.switchRate, err = b.switchHeavy(t.switchTools); err != nil {
		return "", err
	}
	if t.bpf, t.offCPU, err = b.bpfCost(); err != nil {
		return "", err
	}
	b.logf("bpf: done (%s)", time.Since(b.start).Round(time.Second))
	if t.postSamples, t.postBytes, t.post, err = b.postprocess(); err != nil {
		return "", err
	}
	if t.attachTable, err = b.attachTime(b.ruby); err != nil {
		return "", err
	}
	if b.dwarfRuby != "" {
		if t.attachDWARF, err = b.attachTime(b.dwarfRuby); err != nil {
			return "", err
		}
	}
	b.logf("attach: done (%s)", time.Since(b.start).Round(time.Second))
	if t.rss, t.rssSamples, err = b.rssSeries(); err != nil {
		return "", err
	}
	if t.shares, err = b.compareShares(); err != nil {
		return "", err
	}
	if t.alloc, err = b.allocSlowdown(); err != nil {
		return "", err
	}
	return t.String(), nil
}

// measureShares runs only the comparison with stackprof's shares.
func (b *bench) measureShares() (string, error) {
	s, err := b.compareShares()
	if err != nil {
		return "", err
	}
	return s.String(), nil
}

// measureSteady runs only the steady-state comparison of the profilers.
func (b *bench) measureSteady() (string, error) {
	if err := b.calibrate(); err != nil {
		return "", err
	}
	cells, err := b.steadyState()
	if err != nil {
		return "", err
	}
	return steadyTable(b.depths, cells, b.steadyRounds()), nil
}
