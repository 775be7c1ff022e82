package agent

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rssBytes is the agent's resident memory now (VmRSS), 0 if unknown.
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := strings.Fields(string(rest)) // "41234 kB"
			if len(f) >= 1 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// cpuClock measures the agent's own CPU use between two samples.
type cpuClock struct {
	cpu  time.Duration
	wall time.Time
}

// sample is the share of one CPU the agent used since the last sample.
func (c *cpuClock) sample() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	now := time.Now()
	share := 0.0
	if !c.wall.IsZero() && now.After(c.wall) {
		share = float64(cpu-c.cpu) / float64(now.Sub(c.wall))
	}
	c.cpu, c.wall = cpu, now
	return share
}
