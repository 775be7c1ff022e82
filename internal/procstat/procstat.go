package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Fields reads /proc/PID/stat: the fields after the command name, from the
// state on (stat's third field is Fields' first): state ppid pgrp session
// tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ... At least
// those thirteen are there.
func Fields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	out := make([]string, len(f))
	for j := range f {
		out[j] = string(f[j])
	}
	return out, nil
}

// Field indexes of Fields.
const (
	State = 0
	PPID  = 1
	Flags = 6
	UTime = 11
	STime = 12
	// StartTime is when the process started, in clock ticks after boot:
	// with the pid, it names one process (pids are reused). Not among the
	// thirteen Fields promises.
	StartTime = 19
)

// clockTick is USER_HZ, the unit of stat's times (100 on Linux).
const clockTick = 10 * time.Millisecond

// CPU is the CPU time process pid has used so far: utime and stime.
func CPU(pid int) (time.Duration, error) {
	f, err := Fields(pid)
	if err != nil {
		return 0, err
	}
	utime, err := strconv.ParseInt(f[UTime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime: %w", pid, err)
	}
	stime, err := strconv.ParseInt(f[STime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: stime: %w", pid, err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}
