package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestRecordSecureExec: a target run by an unprivileged user that execs a
// setuid program runs on, but the kernel ends perf's events of it with an
// exit record. The summary says so, rather than that it exited.
func TestRecordSecureExec(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	ruby, err := exec.LookPath("ruby3.1") // a system Ruby: nobody can run it
	if err != nil {
		t.Fatalf("ruby3.1: %v (make test installs it)", err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Flags&unix.ST_NOSUID != 0 {
		t.Fatalf("%s: mounted nosuid (%v): the test needs a setuid program", dir, err)
	}
	// A setuid copy of the Ruby: what it execs is a Ruby the recorder
	// would attach again, were the kernel not hiding it.
	suid := filepath.Join(dir, "suidruby")
	testruby.CopyFile(t, ruby, suid)
	if err := os.Chmod(suid, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "spin.rb")
	if err := os.WriteFile(script, []byte("x = 0\nt = Time.now\nx += 1 while Time.now - t < 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(ruby, "-e", `STDOUT.puts "ready"; STDOUT.flush
t = Process.clock_gettime(Process::CLOCK_MONOTONIC); x = 0
x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t < 2
exec ARGV[0], ARGV[1]`, suid, script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := readLine(out); err != nil || line != "ready" {
		t.Fatalf("target: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	var stdout, stderr bytes.Buffer
	if code := run([]string{"record", "-d", "6", "-o", filepath.Join(dir, "rubyperf.data"), "-p", strconv.Itoa(pid)}, &stdout, &stderr); code != 0 {
		t.Fatalf("record: exit %d: %s", code, stderr.String())
	}
	want := "pid " + strconv.Itoa(pid) + " exec'd suidruby and runs on as a setuid or setgid program"
	if !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "and exited") {
		t.Errorf("record does not say %q:\n%s", want, stderr.String())
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err != nil || strings.TrimSpace(string(b)) != "suidruby" {
		t.Errorf("the target no longer runs suidruby (%q, %v): the test proves nothing", b, err)
	}
}

// readLine reads one line from r, a byte at a time (nothing past it).
func readLine(r io.Reader) (string, error) {
	var b []byte
	c := make([]byte, 1)
	for len(b) < 4096 {
		if _, err := r.Read(c); err != nil {
			return string(b), err
		}
		if c[0] == '\n' {
			return string(b), nil
		}
		b = append(b, c[0])
	}
	return string(b), nil
}
