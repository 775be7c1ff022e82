package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/procstat"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestRecordFailedStart: nothing `record -- CMD` starts outlives a
// recording that fails to start. A directory planted where the replaced
// recording is kept (OUT.old, in a shared directory anyone can write) is
// refused before the command starts; a command that never becomes a Ruby
// is ended with the processes it started.
func TestRecordFailedStart(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.1")

	t.Run("planted .old directory", func(t *testing.T) {
		dir := t.TempDir()
		out := filepath.Join(dir, "rubyperf.data")
		marker := filepath.Join(dir, "started")
		if err := os.WriteFile(out, []byte("the last recording"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(out+".old", "planted"), 0o777); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run([]string{"record", "-o", out, "--", r.Exe, "-e",
			fmt.Sprintf(`File.write(%q, $$.to_s); sleep 60`, marker)}, &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), out+".old: a directory") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("exit %d, want 1 and one line naming %s.old:\n%s", code, out, stderr.String())
		}
		if b, _ := os.ReadFile(out); string(b) != "the last recording" {
			t.Errorf("%s now holds %q", out, b)
		}
		checkGone(t, marker)
	})

	t.Run("command that never becomes a Ruby", func(t *testing.T) {
		dir := t.TempDir()
		marker := filepath.Join(dir, "started")
		var stdout, stderr bytes.Buffer
		code := run([]string{"record", "-o", filepath.Join(dir, "rubyperf.data"), "--", "sh", "-c",
			fmt.Sprintf(`sleep 300 & echo $! > %s; exec sleep 301`, marker)}, &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "not a Ruby process") {
			t.Errorf("exit %d, want 1 and a refusal:\n%s", code, stderr.String())
		}
		checkGone(t, marker)
	})
}

// checkGone fails when the process whose pid a command wrote to marker
// still runs (a zombie waiting for a reaper has ended).
func checkGone(t *testing.T, marker string) {
	t.Helper()
	b, err := os.ReadFile(marker)
	if err != nil {
		return // never started
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("%s holds %q", marker, b)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := procstat.Fields(pid)
		if err != nil || st[procstat.State] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("pid %d, started by the command, outlived the failed recording: state %s", pid, st[procstat.State])
			return
		}
	}
}
