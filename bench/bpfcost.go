package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// bpfRow is the BPF program's cost at one stack depth.
type bpfRow struct {
	shape                              string  // "depth": one method's recursion; "distinct": distinct methods and blocks
	depth, stack                       int     // Ruby frames; bytes of user stack copied
	nsPerSample, framesPerSamp, urgent float64 // ns: the median window
	p10, p90                           float64 // ns per sample in the 10th and 90th percentile windows
}

// bpfCost runs the bpf package's BenchmarkBPFRunTime (the kernel's own BPF
// run-time statistics while a Ruby spins at 10, 200 and 2000 frames of one
// method's recursion or of distinct methods and blocks, and with stack
// copies of several sizes).
func (b *bench) bpfCost() ([]bpfRow, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkBPFRunTime$", "-benchtime", "5x", "./bpf")
	cmd.Dir = b.repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("BenchmarkBPFRunTime: %v: %s", err, lastLine(string(out)))
	}
	var rows []bpfRow
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "BenchmarkBPFRunTime/") {
			continue
		}
		// BenchmarkBPFRunTime/distinct-200-stack-8192-2 (GOMAXPROCS last)
		parts := strings.Split(strings.TrimPrefix(f[0], "BenchmarkBPFRunTime/"), "-")
		if len(parts) < 4 || parts[2] != "stack" {
			continue
		}
		var r bpfRow
		r.shape = parts[0]
		r.depth, _ = strconv.Atoi(parts[1])
		r.stack, _ = strconv.Atoi(parts[3])
		for i := 1; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/sample":
				r.nsPerSample = v
			case "p10-ns/sample":
				r.p10 = v
			case "p90-ns/sample":
				r.p90 = v
			case "frames/sample":
				r.framesPerSamp = v
			case "urgent/sample":
				r.urgent = v
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("BenchmarkBPFRunTime printed no results")
	}
	return rows, nil
}
