package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// bpfRow is the BPF program's cost at one stack depth.
type bpfRow struct {
	shape                              string  // "depth": one method's recursion; "distinct": distinct methods and blocks; "labels": labels.rb; "blocks": nativedeep.rb
	depth, stack                       int     // Ruby frames; bytes of user stack copied
	variant                            string  // "": the default; "nothread": EcThread = 0; "labels": request labels read; "native": unwound with the tables
	nsPerSample, framesPerSamp, urgent float64 // ns: the median window
	p10, p90                           float64 // ns per sample in the 10th and 90th percentile windows
	labels                             float64 // request labels per labelled sample (shape "labels")
	natives                            float64 // native frames per sample unwound with the tables (variant "native")
	// A variant's run alternates windows with its peer's configuration (the
	// default; labels.rb without labels read): the peer's windows, and the
	// median of the paired differences, variant less peer, over pairs.
	peer, peerP10, peerP90, diff, pairs float64
}

// offCPURow is BenchmarkOffCPU's result: the off-CPU program (sched_switch,
// --wall) and, its peer in the same run, the cpu-clock one.
type offCPURow struct {
	target                       string  // "gvl": states.rb gvl; "pass": threads calling Thread.pass
	nsPerRun, idleNsPerRun       float64 // every switch of the machine while sampling; before the target was added
	nsPerSample, p10, p90        float64 // the off-CPU program's time per off-CPU sample, every run counted
	samplingNs                   float64 // the same less the other runs' idle cost
	cpuNs, cpuP10, cpuP90        float64 // sample_ruby's time per cpu-clock sample
	offCPURate, cpuRate, switchR float64 // off-CPU samples, cpu-clock samples and switches of the machine per second
	frames                       float64 // Ruby frames per sample
}

// bpfCost runs the bpf package's BenchmarkBPFRunTime (the kernel's own BPF
// run-time statistics while a Ruby spins at 10, 200 and 2000 frames of one
// method's recursion or of distinct methods and blocks, and with stack
// copies of several sizes; A/B variants without the thread's state and with
// request labels) and BenchmarkOffCPU.
func (b *bench) bpfCost() ([]bpfRow, []offCPURow, error) {
	benchtime := "5x"
	if b.quick {
		benchtime = "1x" // one second a configuration
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^(BenchmarkBPFRunTime|BenchmarkOffCPU)$", "-benchtime", benchtime, "./bpf")
	cmd.Dir = b.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, nil, fmt.Errorf("BenchmarkBPFRunTime, BenchmarkOffCPU: %v: %s", err, lastLine(string(out)))
	}
	var rows []bpfRow
	var off []offCPURow
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		metrics := map[string]float64{}
		for i := 1; i+1 < len(f); i++ {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				metrics[f[i+1]] = v
			}
		}
		if target, ok := strings.CutPrefix(f[0], "BenchmarkOffCPU/"); ok {
			// BenchmarkOffCPU/gvl-2 (GOMAXPROCS last, but for GOMAXPROCS=1)
			target, _, _ = strings.Cut(target, "-")
			off = append(off, offCPURow{
				target:   target,
				nsPerRun: metrics["offcpu-ns/run"], idleNsPerRun: metrics["idle-ns/run"],
				nsPerSample: metrics["offcpu-ns/sample"], p10: metrics["p10-offcpu-ns/sample"], p90: metrics["p90-offcpu-ns/sample"],
				samplingNs: metrics["sampling-ns/sample"],
				cpuNs:      metrics["cpu-ns/sample"], cpuP10: metrics["p10-cpu-ns/sample"], cpuP90: metrics["p90-cpu-ns/sample"],
				offCPURate: metrics["offcpu-samples/s"], cpuRate: metrics["cpu-samples/s"], switchR: metrics["switches/s"],
				frames: metrics["frames/sample"],
			})
			continue
		}
		if !strings.HasPrefix(f[0], "BenchmarkBPFRunTime/") {
			continue
		}
		// BenchmarkBPFRunTime/distinct-200-stack-8192[-VARIANT]-2 (GOMAXPROCS
		// last, but for GOMAXPROCS=1)
		parts := strings.Split(strings.TrimPrefix(f[0], "BenchmarkBPFRunTime/"), "-")
		if len(parts) < 4 || parts[2] != "stack" {
			continue
		}
		var r bpfRow
		r.shape = parts[0]
		r.depth, _ = strconv.Atoi(parts[1])
		r.stack, _ = strconv.Atoi(parts[3])
		if len(parts) > 4 {
			if _, err := strconv.Atoi(parts[4]); err != nil {
				r.variant = parts[4]
			}
		}
		r.nsPerSample, r.p10, r.p90 = metrics["ns/sample"], metrics["p10-ns/sample"], metrics["p90-ns/sample"]
		r.framesPerSamp, r.urgent, r.labels = metrics["frames/sample"], metrics["urgent/sample"], metrics["labels/labelled-sample"]
		r.peer, r.peerP10, r.peerP90 = metrics["peer-ns/sample"], metrics["p10-peer-ns/sample"], metrics["p90-peer-ns/sample"]
		r.diff, r.pairs = metrics["diff-ns/sample"], metrics["pairs"]
		r.natives = metrics["natives/unwound-sample"]
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, nil, fmt.Errorf("BenchmarkBPFRunTime printed no results")
	}
	if len(off) == 0 {
		return nil, nil, fmt.Errorf("BenchmarkOffCPU printed no result")
	}
	return rows, off, nil
}
