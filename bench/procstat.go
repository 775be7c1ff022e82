package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procSample is a process's CPU time and context switches at one moment,
// summed over its threads.
type procSample struct {
	at                     time.Time
	cpu                    time.Duration
	voluntary, involuntary int64
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTick = 10 * time.Millisecond

// sampleProc reads /proc/PID/stat (utime, stime) and every thread's
// context switches from /proc/PID/task/*/status.
func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name may hold spaces: fields start after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	s.cpu = time.Duration(utime+stime) * clockTick
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
