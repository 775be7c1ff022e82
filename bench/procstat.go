package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rubyperf/rubyperf/internal/procstat"
)

// procSample is a process's CPU time and context switches at one moment,
// summed over its threads.
type procSample struct {
	at                     time.Time
	cpu                    time.Duration
	voluntary, involuntary int64
	// onCPU is its live threads' time on a CPU to the nanosecond
	// (/proc/PID/task/*/schedstat), where cpu counts clock ticks (10 ms):
	// for the few milliseconds a second a profiler uses.
	onCPU time.Duration
}

// sampleProc reads /proc/PID/stat (utime, stime) and every thread's
// context switches from /proc/PID/task/*/status.
func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	cpu, err := procstat.CPU(pid)
	if err != nil {
		return s, err
	}
	s.cpu = cpu
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		v, _ := statusValue(b, "voluntary_ctxt_switches")
		nv, _ := statusValue(b, "nonvoluntary_ctxt_switches")
		s.voluntary += v
		s.involuntary += nv
		if b, err := os.ReadFile(filepath.Join(filepath.Dir(t), "schedstat")); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				s.onCPU += time.Duration(ns)
			}
		}
	}
	return s, nil
}

// statusValue is the number after "key:" in a /proc status file (for
// VmRSS, in KiB).
func statusValue(status []byte, key string) (int64, bool) {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// vmRSS reads VmRSS (KiB) from /proc/PID/status.
func vmRSS(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	return statusValue(b, "VmRSS")
}
