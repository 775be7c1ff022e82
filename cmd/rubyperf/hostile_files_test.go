package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// nobodysDir is a directory of uid 65534's under /tmp, as a user's own would
// be: a FIFO put there blocks whoever opens it for reading until a writer
// comes, unless the opener asks not to wait.
func nobodysDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rubyperf-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asNobody runs a shell command as uid 65534 and fails the test if it fails.
func asNobody(t *testing.T, script string, args ...string) {
	t.Helper()
	c := exec.Command("sh", append([]string{"-ec", script, "sh"}, args...)...)
	c.SysProcAttr = nobody()
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("as uid 65534: %s: %v: %s", script, err, out)
	}
}

// copyAsNobody copies from to to, a file of uid 65534's.
func copyAsNobody(t *testing.T, from, to string) string {
	t.Helper()
	testruby.CopyFile(t, from, to)
	if err := os.Chown(to, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return to
}

// rubyFile is the path of a file ruby maps or loads, as the Ruby code
// given prints it.
func rubyFile(t *testing.T, ruby, code string) string {
	t.Helper()
	out, err := exec.Command(ruby, "-e", code).Output()
	if err != nil || len(out) == 0 || out[0] != '/' {
		t.Fatalf("%s -e %q: %q, %v", ruby, code, out, err)
	}
	return string(out)
}

// hostileRunTimeout bounds one command of these tests: each takes well
// under a second here; one blocked in open(2) would never end.
const hostileRunTimeout = 30 * time.Second

// runBounded runs the rubyperf binary with args for at most
// hostileRunTimeout; one still running then is killed, and the test fails
// rather than hang. It returns stdout, stderr and the exit code (-1: killed).
func runBounded(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hostileRunTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	err := c.Run()
	if ctx.Err() != nil {
		t.Errorf("rubyperf %s: still running after %s (blocked?), killed; stderr: %s", strings.Join(args, " "), hostileRunTimeout, stderr.String())
		return stdout.String(), stderr.String(), -1
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("rubyperf %s: exit %d after %s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
	return stdout.String(), stderr.String(), code
}

// TestFIFOInPlaceOfReadFiles: uid 65534 runs a Ruby with its own copy of
// libruby; root records it. Then the user puts a FIFO where the copy was,
// and one where the .symbols file of an unfinished recording was. script,
// report and convert finish at once all the same: Ruby frames named, the
// library's native frames unnamed, and one line naming the FIFO.
func TestFIFOInPlaceOfReadFiles(t *testing.T) {
	ruby := leastPrivilegeRuby(t)
	testskip.Privileged(t, bpf.Supported())
	bin := rubyperfBinary(t)

	dir := nobodysDir(t)
	libruby := rubyFile(t, ruby, `print File.foreach("/proc/self/maps").map { _1.split[5].to_s }.find { _1.include?("/libruby") }`)
	lib := copyAsNobody(t, libruby, filepath.Join(dir, sonameOf(t, libruby)))
	c := exec.Command(ruby, "-e", `def spin = loop { IO.binread("/dev/urandom", 4096) }; STDOUT.puts "ready"; STDOUT.flush; spin`)
	c.Env, c.SysProcAttr = append(os.Environ(), "LD_LIBRARY_PATH="+dir), nobody()
	testruby.StartCommand(t, c)
	pid := c.Process.Pid
	if got := mappedLibruby(t, pid); got != lib {
		t.Fatalf("uid 65534's Ruby maps %s, not its copy %s", got, lib)
	}

	// A finished recording, and one killed after its checkpoints: its Ruby
	// names are in the .symbols file beside it. Both in a directory anyone
	// may write in, like /tmp.
	shared := nobodysDir(t)
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	finished := filepath.Join(shared, "finished.data")
	if _, stderr, code := runBounded(t, bin, "record", "-F", "199", "-d", "2", "-o", finished, "-p", strconv.Itoa(pid)); code != 0 {
		t.Fatalf("record: exit %d: %s", code, stderr)
	}
	killed := filepath.Join(shared, "killed.data")
	rec := exec.Command(bin, "record", "-F", "199", "-o", killed, "-p", strconv.Itoa(pid))
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond) // three checkpoints, a second apart, after attaching
	rec.Process.Kill()
	rec.Wait()
	symbols := killed + ".symbols"
	if _, err := os.Stat(symbols); err != nil {
		t.Fatalf("the killed recording left no names beside it: %v", err)
	}

	// The user's FIFOs: in place of its library, and of the .symbols file
	// (gone: a recorder killed before its first checkpoint leaves none).
	asNobody(t, `mv "$1" "$1.gone" && mkfifo "$1"`, lib)
	if err := os.Remove(symbols); err != nil {
		t.Fatal(err)
	}
	asNobody(t, `mkfifo "$1"`, symbols)

	refused := lib + ": it is a named pipe (FIFO), not a regular file"
	folded := filepath.Join(t.TempDir(), "folded")
	for _, args := range [][]string{
		{"script", "-i", finished},
		{"report", "-i", finished},
		{"convert", "-i", finished, "-f", "folded", "-o", folded},
	} {
		stdout, stderr, code := runBounded(t, bin, args...)
		if code == -1 {
			continue
		}
		if args[0] == "convert" {
			b, err := os.ReadFile(folded)
			if err != nil {
				t.Fatal(err)
			}
			stdout = string(b)
		}
		if code != 0 || !strings.Contains(stdout, "Object#spin") {
			t.Errorf("%s of a recording whose library is now a FIFO: exit %d, Object#spin named: %v; stderr: %s",
				args[0], code, strings.Contains(stdout, "Object#spin"), stderr)
		}
		if lines := strings.Count(stderr, refused); lines != 1 {
			t.Errorf("%s: %d lines saying %q, want 1; stderr: %s", args[0], lines, refused, stderr)
		}
	}

	stdout, stderr, code := runBounded(t, bin, "report", "-i", killed)
	if code == -1 {
		return
	}
	if code != 0 || reportSamples(t, stdout) < 20 {
		t.Errorf("report of an unfinished recording whose .symbols is a FIFO: exit %d, want 0 and the samples up to its last checkpoint:\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, symbols+": it is a named pipe (FIFO), not a regular file") {
		t.Errorf("report does not name %s as unreadable: %s", symbols, stderr)
	}
}

// TestAgentFIFOAtExtensionPath: uid 65534's Ruby loads its own copy of an
// extension, and once the agent samples it, renames the copy and puts a
// FIFO at its path, then runs the extension's code. The agent says so in
// one line naming the path, goes on profiling the user's Ruby (its
// extension's frames unnamed) and root's beside it, and stops promptly on
// SIGTERM.
func TestAgentFIFOAtExtensionPath(t *testing.T) {
	ruby := leastPrivilegeRuby(t)
	testskip.Privileged(t, bpf.Supported())
	bin := rubyperfBinary(t)
	col := otelcoltest.Start(t)
	token := fmt.Sprintf("rubyperf-fifo-%d", time.Now().UnixNano())

	dir := nobodysDir(t)
	ext := copyAsNobody(t, rubyFile(t, ruby, `require "nkf"; print $".find { _1.end_with?("/nkf.so") }`), filepath.Join(dir, "nkf.so"))
	swap := filepath.Join(dir, "swap") // made by the test when the agent samples the user's Ruby
	// Until told, the user's Ruby runs Ruby code only (Object#wait): no
	// sample falls in the extension before the FIFO is there.
	user := exec.Command(ruby, "-e", `
ext, swap = ARGV
require ext
def wait(swap) = (n = 0; n += 1 until File.exist?(swap))
def convert(s) = loop { NKF.nkf("-s", s) }
STDOUT.puts "ready"; STDOUT.flush
wait(swap)
File.rename(ext, ext + ".gone")
File.mkfifo(ext)
convert("\u3042\u3044\u3046" * 100_000)`, ext, swap, token)
	user.SysProcAttr = nobody()
	root := exec.Command(ruby, "-e", `def spin = loop { IO.binread("/dev/urandom", 4096) }; STDOUT.puts "ready"; STDOUT.flush; spin`, token)
	testruby.StartCommand(t, user)
	testruby.StartCommand(t, root)

	agent := exec.Command(bin, "agent", "--endpoint", col.GRPCAddr, "--insecure", "--interval", "1s", "--flush-timeout", "5s", "--match", token)
	log := &testruby.Log{}
	agent.Stderr, agent.Dir = log, "/"
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	defer agent.Process.Kill()

	// waitFor polls what the collector received after the first before
	// requests until ok, the agent exits, or d passes.
	waitFor := func(before int, d time.Duration, ok func(map[int]*agentSeen) bool) map[int]*agentSeen {
		t.Helper()
		for deadline := time.Now().Add(d); ; {
			seen := receivedSince(t, col, before)
			if ok(seen) || time.Now().After(deadline) {
				return seen
			}
			select {
			case err := <-done:
				t.Fatalf("the agent exited: %v\n%s", err, log.String())
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	up, r := user.Process.Pid, root.Process.Pid
	seen := waitFor(0, 45*time.Second, func(s map[int]*agentSeen) bool {
		return s[up] != nil && s[up].functions["Object#wait"] > 0 && s[r] != nil && s[r].spin
	})
	if seen[up] == nil || seen[r] == nil {
		t.Fatalf("the agent did not profile uid 65534's Ruby %d and root's %d within 45 s:\n%s", up, r, log.String())
	}

	pds, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	before := len(pds)
	if err := os.WriteFile(swap, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	refused := ext + ": it is a named pipe (FIFO), not a regular file"
	// Profiles after the swap, with the user's extension running: both
	// processes keep arriving (a blocked agent sends none). The cores are
	// shared with other tests: half a second of CPU time each is enough.
	const after = 50
	in := func(s map[int]*agentSeen, pid int, function string) int64 {
		if s[pid] == nil {
			return 0
		}
		return s[pid].functions[function]
	}
	seen = waitFor(before, 30*time.Second, func(s map[int]*agentSeen) bool {
		return in(s, up, "NKF.nkf") >= after && in(s, r, "Object#spin") >= after && strings.Contains(log.String(), refused)
	})
	if n := in(seen, r, "Object#spin"); n < after {
		t.Errorf("root's Ruby %d after the FIFO: %d samples in Object#spin, want %d or more", r, n, after)
	}
	if n := in(seen, up, "NKF.nkf"); n < after {
		t.Errorf("uid 65534's Ruby %d after the FIFO: %d samples in NKF.nkf, want %d or more", up, n, after)
	}
	t.Logf("after the FIFO: root's Ruby %d samples in Object#spin, uid 65534's %d in NKF.nkf", in(seen, r, "Object#spin"), in(seen, up, "NKF.nkf"))
	if n := strings.Count(log.String(), refused); n != 1 {
		t.Errorf("the agent's log has %d lines %q, want 1:\n%s", n, refused, log.String())
	}

	start := time.Now()
	agent.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("the agent exited %s after SIGTERM: %v", took.Round(time.Millisecond), err)
		if err != nil || took > 5*time.Second {
			t.Errorf("the agent took %s to stop after SIGTERM (%v), want under 5 s:\n%s", took, err, lastLines(log.String(), 5))
		}
	case <-time.After(15 * time.Second):
		agent.Process.Kill()
		t.Errorf("the agent still ran 15 s after SIGTERM; killed:\n%s", lastLines(log.String(), 5))
	}
}
