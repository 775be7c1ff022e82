package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// oneLine checks a refusal: exit 1 and one line on stderr, starting
// "rubyperf: pid N: " and containing every want.
func oneLine(t *testing.T, what string, code int, stderr string, pid int, want ...string) {
	t.Helper()
	msg := strings.TrimRight(stderr, "\n")
	if code != 1 {
		t.Errorf("%s: exit %d, want 1 (stderr %q)", what, code, msg)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("%s: more than one line:\n%s", what, msg)
	}
	if prefix := fmt.Sprintf("rubyperf: pid %d: ", pid); !strings.HasPrefix(msg, prefix) {
		t.Errorf("%s: %q does not start with %q", what, msg, prefix)
	}
	if strings.Count(msg, fmt.Sprintf("pid %d", pid)) != 1 {
		t.Errorf("%s: %q names the pid more than once", what, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not mention %q", what, msg, w)
		}
	}
}

// TestRefuseUnknowableLayout: a stripped Ruby built with a configure flag
// that lengthens the control frame has a version the tables know, but not
// its layout. snapshot, record and offsets -p refuse it in one line, and
// never print a stack; a refused record leaves an existing output as it was.
func TestRefuseUnknowableLayout(t *testing.T) {
	r := testruby.Get(t, "source-3.3-shifted-stripped")
	if !r.Refused {
		t.Fatalf("%s is not marked as a build to refuse", r.Name)
	}
	cmd := testruby.Start(t, r, "-e", `def parked = (STDOUT.puts("ready"); STDOUT.flush; sleep); parked`)
	pid := cmd.Process.Pid
	ps := strconv.Itoa(pid)
	wants := []string{"Ruby " + r.Version, "does not fit this process", "--debug-file", "DEBUGINFOD_URLS"}

	var stdout, stderr bytes.Buffer
	code := run([]string{"snapshot", "-p", ps}, &stdout, &stderr)
	if err := reportedError(stderr.String()); code != 0 && errors.Is(err, fs.ErrPermission) {
		testskip.Privileged(t, err)
	}
	oneLine(t, "snapshot", code, stderr.String(), pid, wants...)
	if stdout.Len() > 0 {
		t.Errorf("snapshot printed a stack for a build it refused:\n%s", stdout.String())
	}

	stdout.Reset()
	stderr.Reset()
	code = run([]string{"offsets", "-p", ps}, &stdout, &stderr)
	oneLine(t, "offsets -p", code, stderr.String(), pid, wants...)

	testskip.Privileged(t, bpf.Supported())
	dir := t.TempDir()
	out := filepath.Join(dir, "rubyperf.data")
	if err := os.WriteFile(out, []byte("an earlier recording"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	code = run([]string{"record", "-p", ps, "-d", "1", "-o", out}, &stdout, &stderr)
	oneLine(t, "record", code, stderr.String(), pid, wants...)
	if b, err := os.ReadFile(out); err != nil || string(b) != "an earlier recording" {
		t.Errorf("refused record changed %s: %q, %v", out, b, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("refused record left files behind: %v", names)
	}
}

// TestRecordAllNamesSkips: -a records the Rubies it can read and names each
// one it skips, with the reason, on one line.
func TestRecordAllNamesSkips(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	bad := testruby.Get(t, "source-3.3-shifted-stripped")
	good := testruby.Get(t, "source-3.3-static-stripped")
	spin := `STDOUT.puts "ready"; STDOUT.flush; t = Time.now; nil while Time.now - t < 6`
	b := testruby.Start(t, bad, "-e", spin)
	g := testruby.Start(t, good, "-e", spin)
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "-a", "-d", "2", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("record -a: exit %d: %s", code, stderr.String())
	}
	var skip string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, fmt.Sprintf("rubyperf: pid %d ", b.Process.Pid)) {
			skip = l
		}
		if strings.HasPrefix(l, fmt.Sprintf("rubyperf: pid %d ", g.Process.Pid)) {
			t.Errorf("skipped a Ruby it can read: %s", l)
		}
	}
	for _, w := range []string{"(ruby -e)", "skipped", "does not fit this process"} {
		if !strings.Contains(skip, w) {
			t.Errorf("skip line %q does not mention %q; stderr:\n%s", skip, w, stderr.String())
		}
	}
	pids := map[int]int{}
	for _, s := range perfScript(t, out) {
		pids[s.pid]++
	}
	if pids[g.Process.Pid] == 0 || pids[b.Process.Pid] != 0 {
		t.Errorf("samples by pid %v: want %d recorded and %d not", pids, g.Process.Pid, b.Process.Pid)
	}
}
