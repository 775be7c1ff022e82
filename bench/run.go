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

// runLines is run with each line of stdout also given to line as it is
// printed, with the command's pid.
func runLines(env []string, line func(pid int, line string), argv ...string) (result, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return result{}, err
	}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return result{}, err
	}
	pw.Close()
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		line(cmd.Process.Pid, sc.Text())
	}
	pr.Close()
	err = cmd.Wait()
	r := finished(cmd, time.Since(start))
	r.stdout, r.stderr = out.String(), errb.String()
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, lastLine(r.stderr))
	}
	return r, nil
}

// result is one finished command: what it printed and what it cost.
type result struct {
	stdout, stderr string
	wall           time.Duration
	cpu            time.Duration // user + system of the command itself (children included when waited for)
	maxRSS         int64         // KiB
	voluntary      int64         // context switches: waits (wake-ups)
	involuntary    int64         // preemptions
}

// run executes argv with extra environment and returns its result; a
// failure carries the command's stderr.
func run(env []string, argv ...string) (result, error) { return runTo(nil, env, argv...) }

// runTo is run with stdout sent to w (io.Discard for large outputs) instead
// of kept.
func runTo(w io.Writer, env []string, argv ...string) (result, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if w != nil {
		cmd.Stdout = w
	}
	start := time.Now()
	err := cmd.Run()
	r := finished(cmd, time.Since(start))
	r.stdout, r.stderr = out.String(), errb.String()
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, lastLine(r.stderr))
	}
	return r, nil
}

func finished(cmd *exec.Cmd, wall time.Duration) result {
	r := result{wall: wall}
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS, r.voluntary, r.involuntary = ru.Maxrss, ru.Nvcsw, ru.Nivcsw
		}
	}
	return r
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// rubyperfSamples parses the summary rubyperf record prints last.
func rubyperfSamples(stderr string) (int, error) {
	for _, line := range strings.Split(stderr, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "rubyperf: "); ok {
			if f := strings.Fields(rest); len(f) > 1 && f[1] == "samples," {
				return strconv.Atoi(f[0])
			}
		}
	}
	return 0, fmt.Errorf("no rubyperf summary in %q", lastLine(stderr))
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
