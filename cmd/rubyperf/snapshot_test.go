package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

const parkScript = `def park = (STDOUT.puts("ready"); STDOUT.flush; sleep); park`

func TestSnapshotJSON(t *testing.T) {
	r := testruby.Get(t, "source-3.3-static")
	cmd := testruby.Start(t, r, "-e", parkScript)
	pid := strconv.Itoa(cmd.Process.Pid)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"snapshot", "-p", pid, "--format", "json"}, &stdout, &stderr); code != 0 {
		testskip.Privileged(t, fmt.Errorf("exit %d: %w", code, reportedError(stderr.String())))
	}
	var doc snapshotJSON
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.PID != cmd.Process.Pid || doc.Version != r.Version || len(doc.Threads) != 1 {
		t.Fatalf("document %+v", doc)
	}
	th := doc.Threads[0]
	if th.TID != cmd.Process.Pid || th.Name != "main" || len(th.Frames) < 2 {
		t.Fatalf("thread %+v", th)
	}
	// Leaf first; null path for the C method; the caller's line.
	if f := th.Frames[0]; f.Label != "Kernel#sleep" || f.Path != nil || f.Line != 0 {
		t.Errorf("frame 0 = %+v", f)
	}
	if f := th.Frames[1]; f.Label != "Object#park" || f.Path == nil || *f.Path != "-e" || f.Line != 1 {
		t.Errorf("frame 1 = %+v", f)
	}
	// The text form reads like a Ruby backtrace.
	stdout.Reset()
	if code := run([]string{"snapshot", "-p", pid}, &stdout, &stderr); code != 0 {
		t.Fatalf("text: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "-e:1:in 'Kernel#sleep'\n\t-e:1:in 'Object#park'") {
		t.Errorf("text snapshot:\n%s", stdout.String())
	}
}

func TestSnapshotErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no pid", []string{"snapshot"}, 2, "give -p PID"},
		{"bad format", []string{"snapshot", "-p", "1", "--format", "yaml"}, 2, `--format "yaml"`},
		{"dead pid", []string{"snapshot", "-p", "4194001"}, 1, "rubyperf: pid 4194001: no such process"},
		{"not ruby", []string{"snapshot", "-p", strconv.Itoa(os.Getpid())}, 1, "not a Ruby process"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}

// TestSnapshotNoPermission runs rubyperf as user nobody against a Ruby owned
// by root: one line naming the pid and what to do, exit 1.
func TestSnapshotNoPermission(t *testing.T) {
	testskip.Root(t, "to run a process as another user")
	r := testruby.Get(t, "debian-3.1")
	cmd := testruby.Start(t, r, "-e", parkScript)
	dir, err := os.MkdirTemp("", "rubyperf-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // nobody must be able to run it
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "rubyperf")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c := exec.Command(bin, "snapshot", "-p", strconv.Itoa(cmd.Process.Pid))
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	err = c.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("err %v, want exit 1; stderr %q", err, stderr.String())
	}
	msg := strings.TrimSpace(stderr.String())
	want := "rubyperf: pid " + strconv.Itoa(cmd.Process.Pid) + ": permission denied"
	if !strings.HasPrefix(msg, want) || strings.Contains(msg, "\n") || !strings.Contains(msg, "root") {
		t.Errorf("stderr %q, want one line starting %q that says what to do", msg, want)
	}
}
