package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// spinner is a Ruby spinning at a fixed depth (testdata/ruby/depth.rb).
type spinner struct{ cmd *exec.Cmd }

// spin starts ruby at depth and waits until it spins there.
func (b *bench) spin(ruby string, depth int) (*spinner, error) {
	cmd := exec.Command(ruby, b.depthScript, strconv.Itoa(depth))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("printed %q", line)
		}
		ready <- err
		io.Copy(io.Discard, out)
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("not ready in 30s")
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s %s: %w", ruby, b.depthScript, err)
	}
	return &spinner{cmd}, nil
}

func (s *spinner) pid() int { return s.cmd.Process.Pid }

func (s *spinner) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// postResult is one post-processor's throughput on the shared recording.
type postResult struct {
	name        string
	samplesPerS []float64
	rssKiB      []float64
}

// postprocess records at least b.postSamples samples of two spinning Rubies
// (--unwind copy) and times rubyperf script, rubyperf convert -f pprof and perf script on
// that one file, interleaved, b.postRounds times each.
func (b *bench) postprocess() (samples int, size int64, out []*postResult, err error) {
	var targets []string
	for range 2 {
		s, err := b.spin(b.ruby, 50)
		if err != nil {
			return 0, 0, nil, err
		}
		defer s.stop()
		targets = append(targets, strconv.Itoa(s.pid()))
	}
	file := filepath.Join(b.tmp, "post.data")
	secs := b.postSamples/(2*999) + 2
	// With the stack copy alone: perf script and rubyperf unwind the same
	// copies, like for like (by default rubyperf's file has no copy, and
	// perf script would show no native user frame).
	rec, err := run(nil, b.rubyperf, "record", "-F", "999", "--unwind", "copy", "-d", strconv.Itoa(secs), "-o", file, "-p", strings.Join(targets, ","))
	if err != nil {
		return 0, 0, nil, err
	}
	if samples, _, err = rubyperfSamples(rec.stderr); err != nil {
		return 0, 0, nil, err
	}
	size = fileSize(file)
	b.logf("post-processing: recorded %d samples (%.1f MB)", samples, float64(size)/1e6)
	tools := []struct {
		name string
		argv []string
	}{
		{"`rubyperf script`", []string{b.rubyperf, "script", "-i", file}},
		{"`rubyperf convert -f pprof`", []string{b.rubyperf, "convert", "-f", "pprof", "-i", file, "-o", filepath.Join(b.tmp, "post.pb.gz")}},
		{"`perf script`", []string{"perf", "script", "-i", file}},
	}
	for _, t := range tools {
		out = append(out, &postResult{name: t.name})
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, 0, nil, err
	}
	defer devnull.Close()
	for round := range b.postRounds {
		for i, t := range tools {
			r, err := runTo(devnull, nil, t.argv...) // a file: no pipe for the tool to pay for
			if err != nil {
				return 0, 0, nil, err
			}
			out[i].samplesPerS = append(out[i].samplesPerS, float64(samples)/r.wall.Seconds())
			out[i].rssKiB = append(out[i].rssKiB, float64(r.maxRSS))
		}
		b.logf("post-processing: round %d of %d done", round+1, b.postRounds)
	}
	return samples, size, out, nil
}
