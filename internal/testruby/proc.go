package testruby

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat reads /proc/PID/stat: the fields after the command name (which
// may hold spaces and ')'), from the state on: state ppid pgrp session
// tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ... At
// least those thirteen are there.
func ProcStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	return f, nil
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTick = 10 * time.Millisecond

// ProcessCPU is the CPU time process pid has used so far: utime and stime
// of /proc/PID/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	f, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime: %w", pid, err)
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: stime: %w", pid, err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}
