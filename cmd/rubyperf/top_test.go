package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// topWorkload starts a Ruby whose hottest method is Object#top_hot_method
// (three quarters of its time; Object#top_cold_method the rest), killed
// when the test ends, and returns its pid once its VM is up (it says so).
func topWorkload(t *testing.T) int {
	t.Helper()
	ruby := testskip.Command(t, "ruby", "ruby3.1")
	cmd := exec.Command(ruby, "-e", `def spin(n); x = 0; n.times { |i| x += i }; x; end
def top_hot_method; spin(150_000); end
def top_cold_method; spin(50_000); end
STDOUT.sync = true
puts :ready
loop { top_hot_method; top_cold_method }`)
	testruby.StartCommand(t, cmd)
	return cmd.Process.Pid
}

// terminal is a real terminal (a tmux server of the test's own, killed
// when the test ends) running one shell command.
type terminal struct {
	t            *testing.T
	tmux, socket string
}

// newTerminal starts command in a terminal of width x height.
func newTerminal(t *testing.T, name string, width, height int, command string) *terminal {
	t.Helper()
	term := &terminal{t: t, tmux: testskip.Command(t, "tmux", "tmux"), socket: fmt.Sprintf("rubyperf-%s-%d", name, os.Getpid())}
	t.Cleanup(func() { exec.Command(term.tmux, "-L", term.socket, "kill-server").Run() })
	term.run("new-session", "-d", "-x", strconv.Itoa(width), "-y", strconv.Itoa(height), "sh", "-c", command)
	return term
}

// run runs a tmux command on the terminal's server and returns its output.
func (term *terminal) run(args ...string) string {
	term.t.Helper()
	out, err := exec.Command(term.tmux, append([]string{"-L", term.socket}, args...)...).CombinedOutput()
	if err != nil {
		term.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the terminal shows.
func (term *terminal) screen() string { return term.run("capture-pane", "-p") }

// wait polls the screen until it holds want, for at most d, and returns it.
func (term *terminal) wait(want string, d time.Duration) string {
	term.t.Helper()
	var screen string
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if screen = term.screen(); strings.Contains(screen, want) {
			return screen
		}
	}
	term.t.Fatalf("after %s the terminal shows no %q:\n%s", d, want, screen)
	return ""
}

// TestTopTerminal: rubyperf top -p PID in a real terminal (tmux) shows the
// workload's hottest method within 10 seconds; t sorts by total time and
// the heading says so; q quits: top exits 0 and says what it sampled.
func TestTopTerminal(t *testing.T) {
	testskip.Root(t, "top samples another process")
	pid := topWorkload(t)
	bin := rubyperfBinary(t)
	term := newTerminal(t, "top", 150, 40, fmt.Sprintf("%s top -p %d; echo top exited $?; sleep 60", bin, pid))
	screen := term.wait("Object#top_hot_method", 10*time.Second)
	t.Logf("%s", screen)
	if !strings.Contains(screen, "methods by self") || !strings.Contains(screen, "q quit") {
		t.Errorf("the screen says neither how it is sorted nor how to quit:\n%s", screen)
	}
	term.run("send-keys", "t")
	screen = term.wait("methods by total", 3*time.Second)
	if i, j := strings.Index(screen, "<main>"), strings.Index(screen, "Object#top_hot_method"); i < 0 || j < 0 || i > j {
		t.Errorf("sorted by total, <main> (in every sample) is not above the hot method (in three quarters):\n%s", screen)
	}
	term.run("send-keys", "q")
	screen = term.wait("top exited", 10*time.Second)
	if !strings.Contains(screen, "top exited 0") || !strings.Contains(screen, "rubyperf top: ") {
		t.Errorf("q did not end top cleanly:\n%s", screen)
	}
}

// TestTopTerminalWarns: under -a in a real terminal, a Ruby top cannot
// read (a control frame longer than any table says) is named on the screen
// with why it is skipped, and the warning is on the normal screen when top
// has left the alternate one, not lost with it.
func TestTopTerminalWarns(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	bad := testruby.Start(t, testruby.Get(t, "source-3.3-shifted-stripped"), "-e",
		`STDOUT.puts "ready"; STDOUT.flush; loop { 1000.times { |i| i * i } }`)
	term := newTerminal(t, "topw", 200, 40, rubyperfBinary(t)+" top -a; echo top exited $?; sleep 60")
	skip := fmt.Sprintf("rubyperf: pid %d (ruby -e): skipped", bad.Process.Pid)
	screen := term.wait("rubyperf top ", 10*time.Second)
	// -a finds Rubies every few seconds; another test's may be skipped
	// after ours, and the screen shows the last warning.
	for end := time.Now().Add(15 * time.Second); !strings.Contains(screen, skip) && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		screen = term.screen()
	}
	if !strings.Contains(screen, skip) {
		t.Logf("the screen did not show our pid's warning (another may have been the last):\n%s", screen)
		if !strings.Contains(screen, "): skipped: ") {
			t.Errorf("the screen shows no warning while a Ruby is skipped:\n%s", screen)
		}
	}
	term.run("send-keys", "q")
	screen = term.wait("top exited", 10*time.Second)
	if !strings.Contains(screen, skip) || !strings.Contains(screen, "does not fit this process") {
		t.Errorf("after top left its screen, the terminal does not say %q and why:\n%s", skip, screen)
	}
	if i, j := strings.Index(screen, skip), strings.Index(screen, "top exited 0"); j < 0 || i > j {
		t.Errorf("top did not exit 0 after printing the warning:\n%s", screen)
	}
}

// TestTopPlain: top writing to a pipe writes plain blocks, one per
// interval, each naming the hottest method, and no terminal escapes.
func TestTopPlain(t *testing.T) {
	testskip.Root(t, "top samples another process")
	pid := topWorkload(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"top", "-p", strconv.Itoa(pid), "-d", "3.5", "--interval", "1s"}, &stdout, &stderr); code != 0 {
		testskip.Privileged(t, fmt.Errorf("top: exit %d: %s", code, stderr.String()))
		t.Fatalf("top: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if n := strings.Count(out, "rubyperf top "); n < 3 {
		t.Errorf("%d blocks in 3.5 s at one a second, want 3:\n%s", n, out)
	}
	if strings.Count(out, "Object#top_hot_method") < 2 {
		t.Errorf("the blocks do not name Object#top_hot_method:\n%s", out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("terminal escapes written to a pipe:\n%q", out)
	}
}

// TestTopRefuses: top's mistakes are one line and exit 2.
func TestTopRefuses(t *testing.T) {
	for _, args := range [][]string{{}, {"-p", "abc"}, {"-p", "1", "-a"}, {"-a", "--interval", "10ms"}, {"-p", "1", "extra"}} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"top"}, args...), &stdout, &stderr)
		if code != 2 || !strings.HasPrefix(stderr.String(), "rubyperf top: ") {
			t.Errorf("top %q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
