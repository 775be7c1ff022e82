package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
)

// TestRecordMuslContainer: the musl test Ruby in a container whose root
// holds nothing but musl's userland (musl's libc, which is its dynamic
// linker, and that Ruby), in its own mount and pid namespaces, as an Alpine
// container is; profiled from the host. snapshot reads both threads'
// stacks, and record -p → report names the workload's methods on both.
// The container's musl is not the host's: it is the test Ruby
// source-3.3-musl-dbg's (stripped, its unwind tables in its debug file),
// at the path of the host's musl (which has no unwind tables anywhere
// here), its debug file under the container's /usr/lib/debug/.build-id
// alone, as Alpine's musl-dbg puts it. Native stacks through it are whole
// (at most 3% of samples under [native unwind incomplete]; 25% with the
// host's musl, which record names) only if both are read through the
// container's root. The process is chrooted in a mount namespace of its
// own, so its maps name its files from that namespace's root, under the
// directory that is its root (the recorder reads them through
// /proc/PID/map_files; before, it found none, and no stack had a native
// frame). (The Ruby's own files are at the same paths on the host, its
// prefix being absolute.)
func TestRecordMuslContainer(t *testing.T) {
	r := testruby.Get(t, "source-3.3-musl")
	dbg := testruby.Get(t, "source-3.3-musl-dbg")
	root := t.TempDir()
	// The Ruby at the same path inside (its load path is its prefix,
	// absolute), and musl's loader, which is its libc.
	exe, err := filepath.EvalSymlinks(r.Exe)
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Dir(filepath.Dir(exe))
	copyTree(t, prefix, filepath.Join(root, prefix))
	interp := muslInterpreter(t, exe)
	libc := filepath.Join(filepath.Dir(dbg.Exe), "lib", "libc.so")
	copyTree(t, libc, filepath.Join(root, interp))
	id := debuginfodtest.BuildID(t, libc)
	copyTree(t, filepath.Join(filepath.Dir(libc), ".debug", "libc.so.debug"),
		filepath.Join(root, "usr", "lib", "debug", ".build-id", id[:2], id[2:]+".debug"))
	script := filepath.Join(root, "app", "workload.rb")
	copyTree(t, "../../testdata/ruby/workload.rb", script)

	cmd := exec.Command(exe, "/app/workload.rb")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the Ruby in %s: %v", root, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("workload.rb in the musl root did not say ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("workload.rb in the musl root not ready in 30 s")
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if got, err := os.Readlink("/proc/" + pid + "/root"); err != nil || got != root {
		t.Fatalf("the Ruby's root is %q (%v), not the container's %s", got, err, root)
	}

	var out, errOut bytes.Buffer
	if code := run([]string{"snapshot", "-p", pid}, &out, &errOut); code != 0 {
		t.Fatalf("snapshot -p %s: exit %d: %s", pid, code, errOut.String())
	}
	for _, want := range []string{"Workload#step", "Workload#serialize"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("snapshot has no %s:\n%s", want, out.String())
		}
	}

	data := filepath.Join(t.TempDir(), "musl.data")
	_, stderr := recordOutput(t, "-p", pid, "-d", "3", "-o", data)
	if strings.Contains(stderr, "call frame information for little") {
		t.Errorf("record found no unwind tables for the container's musl:\n%s", stderr)
	}
	stats, err := readback.ReadStacks(data, readback.ReadOptions{}, func(merge.Stack) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples, %d under [native unwind incomplete]", stats.Samples, stats.Incomplete)
	if stats.Samples < 100 || float64(stats.Incomplete) > 0.03*float64(stats.Samples) {
		t.Errorf("%d of %d samples under [native unwind incomplete]: the container's musl was not unwound with its debug file",
			stats.Incomplete, stats.Samples)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"report", "-i", data, "--threads"}, &out, &errOut); code != 0 {
		t.Fatalf("report: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"Fib.fib", "Workload#serialize", `"serializer"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report --threads has no %s:\n%s", want, out.String())
		}
	}
}

// muslInterpreter is the dynamic linker exe names (PT_INTERP), musl's.
func muslInterpreter(t *testing.T, exe string) string {
	t.Helper()
	b, err := exec.Command("readelf", "-lW", exe).Output()
	if err != nil {
		t.Fatalf("readelf %s: %v", exe, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if _, after, ok := strings.Cut(l, "[Requesting program interpreter: "); ok {
			interp := strings.TrimSuffix(strings.TrimSpace(after), "]")
			if !strings.Contains(interp, "musl") {
				t.Fatalf("%s's interpreter is %s, not musl's", exe, interp)
			}
			return interp
		}
	}
	t.Fatalf("%s names no interpreter", exe)
	return ""
}

// copyTree copies file or directory from to to, symbolic links resolved
// (the loader's name is one).
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-rL", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -rL %s %s: %v: %s", from, to, err, out)
	}
}
