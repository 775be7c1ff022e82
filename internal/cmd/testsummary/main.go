package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// key names a test, or a package (Test empty).
type key struct{ pkg, test string }

// summary is what a run of go test -json said.
type summary struct {
	out     io.Writer
	output  map[key][]string // each test's and package's output, until it ends
	running map[key]bool     // tests started and not ended
	passed  int
	failed  []failure
	skipped []skip
}

// failure is a failed test and the lines it said through t.Log, t.Error
// or t.Fatal (those that start "file.go:N: "), for the digest at the end.
type failure struct {
	test     key
	messages []string
}

// messageLine is a line a test said through its T (go test indents it
// and prefixes the caller's file and line); what follows it, indented
// deeper, is the rest of a multi-line message.
var messageLine = regexp.MustCompile(`^ {4}[\w.+-]+\.go:\d+: `)

// Bounds of the digest of failures at the end of a run, which is what a
// reader of only its last lines (CI's log tail) sees of why.
const (
	digestLines     = 8
	digestLineBytes = 240
)

// digest is a failed test's messages, each cut to its first line and
// digestLineBytes, at most digestLines of them (the last).
func digest(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !messageLine.MatchString(l) {
			continue
		}
		l = strings.TrimSpace(l)
		if len(l) > digestLineBytes {
			n := digestLineBytes
			for n > 0 && !utf8.RuneStart(l[n]) {
				n--
			}
			l = l[:n] + "…"
		}
		out = append(out, l)
	}
	if len(out) > digestLines {
		out = append([]string{fmt.Sprintf("(%d earlier messages)", len(out)-digestLines)}, out[len(out)-digestLines:]...)
	}
	return out
}

type skip struct {
	test   key
	reason string
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, output: map[key][]string{}, running: map[key]bool{}}
}

// take reads one line of go test's output: an event, or text go test
// printed outside any (a build error).
func (s *summary) take(line string) {
	var e event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil {
		fmt.Fprintln(s.out, line)
		return
	}
	k := key{e.Package, e.Test}
	if e.Test != "" {
		switch e.Action {
		case "run":
			s.running[k] = true
		case "pass", "fail", "skip":
			delete(s.running, k)
		}
	}
	switch e.Action {
	case "output", "build-output":
		s.output[k] = append(s.output[k], e.Output)
		if e.Action == "build-output" {
			fmt.Fprint(s.out, e.Output)
		}
	case "pass":
		if e.Test != "" {
			s.passed++
		} else {
			fmt.Fprintf(s.out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		delete(s.output, k)
	case "skip":
		if e.Test != "" {
			s.skipped = append(s.skipped, skip{k, skipReason(s.output[k])})
		}
		delete(s.output, k)
	case "fail":
		if e.Test != "" {
			s.failed = append(s.failed, failure{k, digest(s.output[k])})
		}
		for _, l := range s.output[k] {
			fmt.Fprint(s.out, l)
		}
		if e.Test == "" {
			fmt.Fprintf(s.out, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		delete(s.output, k)
	}
}

// skipReason is what a skipped test said last before its --- SKIP line.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "(no reason given)"
}

// maxUnfinishedLines bounds what finish prints of a test that never ended.
const maxUnfinishedLines = 40

// finish prints the counts and the skips, and says whether the run passed:
// no failure, and no skip where skips are failures (mustRun). A test that
// started and never ended (its package killed: go test's -timeout, whose
// panic lands in the output of the test running) is a failure, its last
// lines printed.
func (s *summary) finish(mustRun bool) bool {
	var unfinished []key
	for k := range s.running {
		unfinished = append(unfinished, k)
	}
	sort.Slice(unfinished, func(i, j int) bool {
		a, b := unfinished[i], unfinished[j]
		return a.pkg < b.pkg || a.pkg == b.pkg && a.test < b.test
	})
	for _, k := range unfinished {
		lines := s.output[k]
		fmt.Fprintf(s.out, "=== %s %s never ended; its last lines:\n", k.pkg, k.test)
		for _, l := range lines[max(0, len(lines)-maxUnfinishedLines):] {
			fmt.Fprint(s.out, l)
		}
		s.failed = append(s.failed, failure{k, append(digest(lines), "(never ended: killed with its package?)")})
	}
	sort.Slice(s.skipped, func(i, j int) bool {
		a, b := s.skipped[i].test, s.skipped[j].test
		return a.pkg < b.pkg || a.pkg == b.pkg && a.test < b.test
	})
	for _, sk := range s.skipped {
		fmt.Fprintf(s.out, "skipped: %s %s: %s\n", sk.test.pkg, sk.test.test, sk.reason)
	}
	for _, f := range s.failed {
		fmt.Fprintf(s.out, "failed: %s %s\n", f.test.pkg, f.test.test)
		for _, m := range f.messages {
			fmt.Fprintf(s.out, "\t%s\n", m)
		}
	}
	fmt.Fprintf(s.out, "tests: %d passed, %d failed, %d skipped\n", s.passed, len(s.failed), len(s.skipped))
	if mustRun && len(s.skipped) > 0 {
		fmt.Fprintln(s.out, "testsummary: tests skipped under CI=true or RUBYPERF_REQUIRE_BPF=1, where every test must run")
		return false
	}
	return len(s.failed) == 0
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testsummary go test -json [flags] [packages]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
	for sc.Scan() {
		s.take(sc.Text())
	}
	runErr := cmd.Wait()
	if !s.finish(testskip.MustRun()) || runErr != nil || sc.Err() != nil {
		if runErr != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", os.Args[1], runErr)
		}
		os.Exit(1)
	}
}
