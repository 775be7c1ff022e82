package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is one finished command: what it printed and what it cost.
type result struct {
	stdout, stderr string
	wall           time.Duration
	maxRSS         int64 // KiB
}

// run executes argv with extra environment and returns its result; a
// failure carries the command's stderr.
func run(env []string, argv ...string) (result, error) { return execute(env, nil, nil, argv...) }

// runTo is run with stdout sent to w, an open file (os.DevNull for large
// outputs: no pipe for the command to pay for), instead of kept.
func runTo(w *os.File, env []string, argv ...string) (result, error) {
	return execute(env, w, nil, argv...)
}

// runLines is run with each line of stdout also given to line as it is
// printed, with the command's pid.
func runLines(env []string, line func(pid int, line string), argv ...string) (result, error) {
	return execute(env, nil, line, argv...)
}

func execute(env []string, to *os.File, line func(pid int, line string), argv ...string) (result, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stderr = &errb
	var pr io.ReadCloser
	switch {
	case to != nil:
		cmd.Stdout = to
	case line != nil:
		var err error
		if pr, err = cmd.StdoutPipe(); err != nil {
			return result{}, err
		}
	default:
		cmd.Stdout = &out
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	if pr != nil {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			line(cmd.Process.Pid, sc.Text())
		}
	}
	err := cmd.Wait()
	r := result{stdout: out.String(), stderr: errb.String(), wall: time.Since(start)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss
	}
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, lastLine(r.stderr))
	}
	return r, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// rubyperfSamples parses the summary rubyperf record prints last: its
// samples, and of them those taken as threads left a CPU (--wall: "N samples
// taken as threads left a CPU, ...").
func rubyperfSamples(stderr string) (samples, offCPU int, err error) {
	found := false
	for _, line := range strings.Split(stderr, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "rubyperf: "); ok {
			f := strings.Fields(rest)
			switch {
			case len(f) > 1 && f[1] == "samples,":
				if samples, err = strconv.Atoi(f[0]); err != nil {
					return 0, 0, err
				}
				found = true
			case len(f) > 0 && strings.HasPrefix(rest, f[0]+" samples taken as threads left a CPU"):
				if offCPU, err = strconv.Atoi(f[0]); err != nil {
					return 0, 0, err
				}
			}
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("no rubyperf summary in %q", lastLine(stderr))
	}
	return samples, offCPU, nil
}

// perfSamples parses perf record's "[ perf record: Captured and wrote X MB F (N samples) ]".
func perfSamples(stderr string) (int, error) {
	i := strings.LastIndex(stderr, "(")
	j := strings.LastIndex(stderr, " samples)")
	if i < 0 || j < i {
		return 0, fmt.Errorf("no perf record summary in %q", lastLine(stderr))
	}
	return strconv.Atoi(stderr[i+1 : j])
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
