package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestRecordLeastPrivilege: the least privilege that records is CAP_BPF and
// CAP_PERFMON, for the processes of one's own user, whatever
// kernel.perf_event_paranoid says; another user's process also needs
// CAP_SYS_PTRACE, and without it the refusal says so in one line.
func TestRecordLeastPrivilege(t *testing.T) {
	ruby := leastPrivilegeRuby(t)
	bin := rubyperfBinary(t)
	// A directory the other user can reach (t.TempDir's parent is 0700).
	dir, err := os.MkdirTemp("", "rubyperf-privilege-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	spin := func(attr *syscall.SysProcAttr) int {
		c := exec.Command(ruby, "-e", `def spin = loop { }; STDOUT.puts "ready"; STDOUT.flush; spin`)
		c.SysProcAttr = attr
		testruby.StartCommand(t, c)
		return c.Process.Pid
	}
	mine, roots := spin(nobody()), spin(nil)
	record := func(pid int, attr *syscall.SysProcAttr) (string, error) {
		out := filepath.Join(dir, fmt.Sprintf("rec-%d.data", time.Now().UnixNano()))
		c := exec.Command(bin, "record", "-d", "1", "-o", out, "-p", strconv.Itoa(pid))
		c.SysProcAttr = attr
		var stderr bytes.Buffer
		c.Stderr = &stderr
		err := c.Run()
		msg := strings.TrimSpace(stderr.String())
		if err == nil {
			var stdout, serr bytes.Buffer
			if code := run([]string{"script", "-i", out}, &stdout, &serr); code != 0 || !strings.Contains(stdout.String(), "Object#spin") {
				t.Errorf("the recording of pid %d as %v: exit %d, no Object#spin: %s", pid, attr.AmbientCaps, code, serr.String())
			}
		}
		return msg, err
	}
	paranoid := "/proc/sys/kernel/perf_event_paranoid"
	was, err := os.ReadFile(paranoid)
	if err != nil {
		testskip.Privileged(t, err)
	}
	t.Cleanup(func() { os.WriteFile(paranoid, was, 0o644) })
	for _, level := range []string{strings.TrimSpace(string(was)), "3"} {
		if err := os.WriteFile(paranoid, []byte(level), 0o644); err != nil {
			testskip.Privileged(t, fmt.Errorf("set %s to %s: %w", paranoid, level, err))
		}
		if msg, err := record(mine, nobody(unix.CAP_BPF, unix.CAP_PERFMON)); err != nil {
			t.Errorf("paranoid %s: CAP_BPF and CAP_PERFMON do not record a process of the same user: %v: %s", level, err, msg)
		}
		msg, err := record(mine, nobody())
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || strings.Contains(msg, "\n") ||
			!strings.Contains(msg, "CAP_BPF") || !strings.Contains(msg, "CAP_PERFMON") {
			t.Errorf("paranoid %s: without capabilities: %v: %q, want exit 1 and one line naming CAP_BPF and CAP_PERFMON", level, err, msg)
		}
	}
	msg, err := record(roots, nobody(unix.CAP_BPF, unix.CAP_PERFMON))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || strings.Contains(msg, "\n") ||
		!strings.Contains(msg, "CAP_SYS_PTRACE") || !strings.Contains(msg, fmt.Sprintf("pid %d", roots)) {
		t.Errorf("another user's process without CAP_SYS_PTRACE: %v: %q, want exit 1 and one line naming the pid and CAP_SYS_PTRACE", err, msg)
	}
	if msg, err := record(roots, nobody(unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYS_PTRACE)); err != nil {
		t.Errorf("CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE do not record another user's process: %v: %s", err, msg)
	}
}

// leastPrivilegeRuby is the Ruby the least-privilege tests run as root and
// as another user: Debian's ruby3.1, which a user without root can read. The
// tests need root, to run processes as another user.
func leastPrivilegeRuby(t *testing.T) string {
	t.Helper()
	testskip.Root(t, "to run processes as another user")
	return testskip.Command(t, "ruby3.1", "ruby3.1")
}

// nobody runs a process as uid and gid 65534 (nobody) with capabilities caps.
func nobody(caps ...uintptr) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, AmbientCaps: caps}
}
