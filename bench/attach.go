package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// attachTime starts `rubyperf record -p` on a spinning Ruby and returns how
// long until the recording is in place: the output file appears once the
// target is attached (its layout read and checked, the BPF program told).
func (b *bench) attachTime(ruby string) ([]float64, error) {
	s, err := b.spin(ruby, 50)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	var ms []float64
	for i := range b.attachRounds {
		out := filepath.Join(b.tmp, fmt.Sprintf("attach%d.data", i))
		cmd := exec.Command(b.rubyperf, "record", "-F", "99", "-d", "1", "-o", out, "-p", strconv.Itoa(s.pid()))
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		var took time.Duration
		for deadline := start.Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
			if _, err := os.Stat(out); err == nil {
				took = time.Since(start)
				break
			}
		}
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("record -p %d: %v", s.pid(), err)
		}
		if took == 0 {
			return nil, fmt.Errorf("record -p %d: no output in 30s", s.pid())
		}
		ms = append(ms, float64(took.Microseconds())/1000)
		os.Remove(out)
	}
	return ms, nil
}

// rssSeries records one spinning Ruby at 999 Hz for b.rssSeconds, reading
// the recorder's resident set every second.
func (b *bench) rssSeries() (series []float64, samples int, err error) {
	s, err := b.spin(b.ruby, 50)
	if err != nil {
		return nil, 0, err
	}
	defer s.stop()
	out := filepath.Join(b.tmp, "rss.data")
	cmd := exec.Command(b.rubyperf, "record", "-F", "999", "-d", strconv.Itoa(b.rssSeconds), "-o", out, "-p", strconv.Itoa(s.pid()))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return nil, 0, fmt.Errorf("record: %v: %s", err, lastLine(stderr.String()))
			}
			samples, _, err := rubyperfSamples(stderr.String())
			os.Remove(out)
			return series, samples, err
		case <-tick.C:
			if kib, ok := vmRSS(cmd.Process.Pid); ok {
				series = append(series, float64(kib))
			}
		}
	}
}
