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
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				s.voluntary += n
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				s.involuntary += n
			}
		}
	}
	return s, nil
}
