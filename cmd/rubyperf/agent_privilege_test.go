package main

import (
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

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestAgentLeastPrivilege: `rubyperf agent` run as a user of its own
// (uid 65534) profiles that user's Ruby processes with CAP_BPF and
// CAP_PERFMON, and root's with CAP_SYS_PTRACE too; without CAP_SYS_PTRACE
// root's Ruby is skipped, in one line naming its pid and CAP_SYS_PTRACE,
// and the agent goes on with the others. CAP_SYSLOG is what names kernel
// frames (kallsyms shows addresses only to it unless kptr_restrict=0 and
// perf_event_paranoid<=1), and CAP_DAC_READ_SEARCH what reads a Ruby whose
// files the agent's user may not read (a 0700 directory). Without CAP_BPF or
// CAP_PERFMON the agent stops at once, saying it needs them. Its perf rings
// are locked memory: a low RLIMIT_MEMLOCK stops it, unless it has
// CAP_IPC_LOCK.
func TestAgentLeastPrivilege(t *testing.T) {
	ruby := leastPrivilegeRuby(t)
	testskip.Privileged(t, bpf.Supported())
	bin := rubyperfBinary(t)
	col := otelcoltest.Start(t)

	// The agent samples only this test's Rubies (--match token): other
	// tests run theirs meanwhile.
	token := fmt.Sprintf("rubyperf-privilege-%d", time.Now().UnixNano())
	// Its reads of /dev/urandom keep it in the kernel part of the time, for
	// kernel frames.
	spin := func(exe string, env []string, attr *syscall.SysProcAttr) int {
		c := exec.Command(exe, "-e", `def spin = loop { IO.binread("/dev/urandom", 4096) }; STDOUT.puts "ready"; STDOUT.flush; spin`, token)
		c.Env, c.SysProcAttr = env, attr
		testruby.StartCommand(t, c)
		return c.Process.Pid
	}
	mine, roots := spin(ruby, nil, nobody()), spin(ruby, nil, nil)
	// Root's Ruby run from a directory only root may read: a copy of the
	// executable and of the libruby it maps.
	hiddenDir := t.TempDir()
	if err := os.Chmod(hiddenDir, 0o700); err != nil {
		t.Fatal(err)
	}
	lib := mappedLibruby(t, roots)
	testruby.CopyFile(t, lib, filepath.Join(hiddenDir, sonameOf(t, lib)))
	hiddenRuby := filepath.Join(hiddenDir, "ruby3.1")
	testruby.CopyFile(t, ruby, hiddenRuby)
	if err := os.Chmod(hiddenRuby, 0o755); err != nil {
		t.Fatal(err)
	}
	hidden := spin(hiddenRuby, append(os.Environ(), "LD_LIBRARY_PATH="+hiddenDir), nil)
	if got := mappedLibruby(t, hidden); filepath.Dir(got) != hiddenDir {
		t.Fatalf("the hidden Ruby maps %s, not the copy in %s", got, hiddenDir)
	}
	t.Logf("uid 65534's Ruby %d, root's %d, root's from a 0700 directory %d", mine, roots, hidden)

	// Kernel frame names: /proc/kallsyms shows addresses to CAP_SYSLOG
	// when kptr_restrict <= 1, to anyone when also perf_event_paranoid <= 1.
	kptr, paranoid := sysctlInt(t, "/proc/sys/kernel/kptr_restrict"), sysctlInt(t, "/proc/sys/kernel/perf_event_paranoid")
	namesWithSyslog, namesWithout := kptr <= 1, kptr == 0 && paranoid <= 1
	t.Logf("kptr_restrict %d, perf_event_paranoid %d: kernel names with CAP_SYSLOG %v, without %v", kptr, paranoid, namesWithSyslog, namesWithout)

	least := []uintptr{unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYS_PTRACE, unix.CAP_SYSLOG}
	// The agent's perf rings (4 MiB a CPU on small machines, 64 MiB in all
	// on big ones) are locked memory: past perf_event_mlock_kb per CPU for
	// its user, its RLIMIT_MEMLOCK or CAP_IPC_LOCK must cover them.
	// Unlimited here, as LimitMEMLOCK=infinity in
	// deploy/systemd/rubyperf-agent.service; where this test may not raise
	// it (no CAP_SYS_RESOURCE), CAP_IPC_LOCK stands in. What CAP_IPC_LOCK
	// does is checked at the end.
	if err := setMemlock(t, unix.RLIM_INFINITY); err != nil {
		t.Logf("%v: every run has CAP_IPC_LOCK too", err)
		least = append(least, unix.CAP_IPC_LOCK)
	}
	without := func(c uintptr) []uintptr {
		var out []uintptr
		for _, x := range least {
			if x != c {
				out = append(out, x)
			}
		}
		return out
	}
	run := func(name string, caps []uintptr, until func(seen map[int]*agentSeen, log string) bool) (map[int]*agentSeen, string) {
		t.Helper()
		seen, log, err := runAgentAs(t, bin, col, token, nobody(caps...), until)
		if err != nil {
			t.Errorf("%s: the agent: %v\n%s", name, err, log)
		}
		for _, pid := range []int{mine, roots, hidden} {
			t.Logf("%s: pid %d: %+v", name, pid, seen[pid])
		}
		return seen, log
	}
	profiled := func(seen map[int]*agentSeen, pids ...int) bool {
		for _, pid := range pids {
			if s := seen[pid]; s == nil || !s.spin {
				return false
			}
		}
		return true
	}
	enoughKernel := func(seen map[int]*agentSeen, pids ...int) bool {
		for _, pid := range pids {
			if s := seen[pid]; s == nil || s.kernel < 20 {
				return false
			}
		}
		return true
	}
	skipLines := func(log string, pid int) []string {
		var out []string
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, fmt.Sprintf("pid %d ", pid)) {
				out = append(out, line)
			}
		}
		return out
	}
	checkKernelNames := func(name string, seen map[int]*agentSeen, want bool, pids ...int) {
		t.Helper()
		for _, pid := range pids {
			s := seen[pid]
			switch {
			case s == nil || s.kernel == 0:
				t.Errorf("%s: pid %d: no kernel frames", name, pid)
			case want && s.kernelNamed == 0:
				t.Errorf("%s: pid %d: none of %d kernel frames is named", name, pid, s.kernel)
			case !want && s.kernelNamed > 0:
				t.Errorf("%s: pid %d: %d of %d kernel frames are named (%s) though kallsyms should hide addresses", name, pid, s.kernelNamed, s.kernel, s.someKernel)
			}
		}
	}

	// The least set for both users' Rubies, with kernel frame names: root's
	// Ruby in a 0700 directory is skipped, in a line naming its pid and what
	// it would take.
	seen, log := run("least", least, func(seen map[int]*agentSeen, log string) bool {
		return profiled(seen, mine, roots) && enoughKernel(seen, mine, roots) && len(skipLines(log, hidden)) > 0
	})
	if !profiled(seen, mine, roots) {
		t.Errorf("CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_SYSLOG: no profile with Object#spin of pid %d (uid 65534) or %d (root)", mine, roots)
	}
	if seen[hidden] != nil {
		t.Errorf("pid %d, whose files uid 65534 may not read, is profiled without CAP_DAC_READ_SEARCH", hidden)
	}
	if lines := skipLines(log, hidden); len(lines) != 1 || !strings.Contains(lines[0], "skipped") || !strings.Contains(lines[0], "CAP_DAC_READ_SEARCH") {
		t.Errorf("pid %d, whose files uid 65534 may not read: %q, want one line saying it is skipped for want of CAP_DAC_READ_SEARCH", hidden, lines)
	} else {
		t.Logf("the line for a Ruby whose files may not be read: %s", lines[0])
	}
	if namesWithSyslog {
		checkKernelNames("least", seen, true, mine, roots)
	}

	// CAP_DAC_READ_SEARCH reads the Ruby in the 0700 directory.
	seen, _ = run("least+CAP_DAC_READ_SEARCH", append(least[:len(least):len(least)], unix.CAP_DAC_READ_SEARCH), func(seen map[int]*agentSeen, _ string) bool {
		return profiled(seen, mine, roots, hidden)
	})
	if !profiled(seen, mine, roots, hidden) {
		t.Errorf("with CAP_DAC_READ_SEARCH too: no profile with Object#spin of pid %d, %d or %d", mine, roots, hidden)
	}

	// Without CAP_SYSLOG kernel frames are there, unnamed.
	if !namesWithSyslog || namesWithout {
		t.Logf("kptr_restrict %d, perf_event_paranoid %d: CAP_SYSLOG makes no difference here; not checked", kptr, paranoid)
	} else {
		seen, _ = run("without CAP_SYSLOG", without(unix.CAP_SYSLOG), func(seen map[int]*agentSeen, _ string) bool {
			return profiled(seen, mine, roots) && enoughKernel(seen, mine, roots)
		})
		if !profiled(seen, mine, roots) {
			t.Errorf("without CAP_SYSLOG: no profile with Object#spin of pid %d or %d", mine, roots)
		}
		checkKernelNames("without CAP_SYSLOG", seen, false, mine, roots)
	}

	// Without CAP_SYS_PTRACE: its own user's Ruby is profiled (CAP_BPF and
	// CAP_PERFMON are enough for it); root's is skipped in one line that
	// names the pid and CAP_SYS_PTRACE.
	seen, log = run("without CAP_SYS_PTRACE", without(unix.CAP_SYS_PTRACE), func(seen map[int]*agentSeen, log string) bool {
		return profiled(seen, mine) && len(skipLines(log, roots)) > 0
	})
	if !profiled(seen, mine) {
		t.Errorf("without CAP_SYS_PTRACE: no profile with Object#spin of pid %d, of the agent's own user", mine)
	}
	if seen[roots] != nil || seen[hidden] != nil {
		t.Errorf("without CAP_SYS_PTRACE: root's pid %d or %d is profiled", roots, hidden)
	}
	if lines := skipLines(log, roots); len(lines) != 1 || !strings.Contains(lines[0], "skipped") || !strings.Contains(lines[0], "CAP_SYS_PTRACE") {
		t.Errorf("without CAP_SYS_PTRACE, root's pid %d: %q, want one line saying it is skipped and naming CAP_SYS_PTRACE", roots, lines)
	}

	// Without CAP_BPF or CAP_PERFMON nothing is sampled: the agent exits 1,
	// naming both.
	for _, c := range []struct {
		name string
		cap  uintptr
	}{{"CAP_BPF", unix.CAP_BPF}, {"CAP_PERFMON", unix.CAP_PERFMON}} {
		seen, log, err := runAgentAs(t, bin, col, token, nobody(without(c.cap)...), func(map[int]*agentSeen, string) bool { return false })
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(log, "CAP_BPF and CAP_PERFMON") || len(seen) > 0 {
			t.Errorf("without %s: %v, %d processes profiled, log:\n%s\nwant exit 1 and a line naming CAP_BPF and CAP_PERFMON", c.name, err, len(seen), log)
		}
	}

	// With an RLIMIT_MEMLOCK of 1 MiB, below what the rings take past the
	// user's perf_event_mlock_kb, the rings cannot be mapped: the agent
	// exits 1. CAP_IPC_LOCK maps them whatever the limit.
	if err := setMemlock(t, 1<<20); err != nil {
		t.Fatal(err)
	}
	seen, log, err := runAgentAs(t, bin, col, token, nobody(without(unix.CAP_IPC_LOCK)...), func(map[int]*agentSeen, string) bool { return false })
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || len(seen) > 0 || !strings.Contains(log, "RLIMIT_MEMLOCK") ||
		!strings.Contains(log, "CAP_IPC_LOCK") {
		t.Errorf("RLIMIT_MEMLOCK 1 MiB, without CAP_IPC_LOCK: %v, %d processes profiled, log:\n%s\nwant exit 1 and a line naming the limit and CAP_IPC_LOCK", err, len(seen), log)
	} else {
		t.Logf("RLIMIT_MEMLOCK 1 MiB, without CAP_IPC_LOCK: %s", lastLines(log, 1))
	}
	seen, _ = run("RLIMIT_MEMLOCK 1 MiB, with CAP_IPC_LOCK", append(without(unix.CAP_IPC_LOCK), unix.CAP_IPC_LOCK), func(seen map[int]*agentSeen, _ string) bool {
		return profiled(seen, mine, roots)
	})
	if !profiled(seen, mine, roots) {
		t.Errorf("RLIMIT_MEMLOCK 1 MiB, with CAP_IPC_LOCK too: no profile with Object#spin of pid %d or %d", mine, roots)
	}
}

// setMemlock sets this process's soft RLIMIT_MEMLOCK, which the processes
// it starts inherit, until the test ends. Only the soft limit: lowering the
// hard one could not be undone without CAP_SYS_RESOURCE, and every later
// test of this binary would run with it.
func setMemlock(t *testing.T, n uint64) error {
	t.Helper()
	var was unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &was); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: min(n, was.Max), Max: was.Max}); err != nil {
		return fmt.Errorf("set RLIMIT_MEMLOCK to %d (from %d): %w", n, was.Cur, err)
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &was); err != nil {
			t.Errorf("restore RLIMIT_MEMLOCK to %d: %v", was.Cur, err)
		}
	})
	return nil
}

// agentSeen is what a collector received of one process from an agent.
type agentSeen struct {
	samples     int64
	spin        bool // a sample in Object#spin
	kernel      int  // kernel frames, in all samples
	kernelNamed int  // of them, named
	someKernel  string
	functions   map[string]int64 // samples with a frame of each function
}

// receivedSince is what col received per pid in the requests after the
// first before.
func receivedSince(t *testing.T, col *otelcoltest.Collector, before int) map[int]*agentSeen {
	t.Helper()
	pds, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]*agentSeen{}
	for _, pd := range pds[min(before, len(pds)):] {
		profs, err := otelcoltest.Flatten(pd)
		if err != nil {
			t.Fatalf("a request the collector received does not resolve: %v", err)
		}
		for _, p := range profs {
			pid, _ := p.Resource["process.pid"].(int64)
			s := out[int(pid)]
			if s == nil {
				s = &agentSeen{functions: map[string]int64{}}
				out[int(pid)] = s
			}
			for _, smp := range p.Samples {
				s.samples += smp.Values[0]
				in := map[string]bool{}
				for _, f := range smp.Frames {
					if !in[f.Function] {
						in[f.Function] = true
						s.functions[f.Function] += smp.Values[0]
					}
					switch {
					case f.Function == "Object#spin":
						s.spin = true
					case f.Type == "kernel":
						s.kernel++
						// A frame with no symbol is named after its file,
						// in brackets ("[kernel.kallsyms]"), as in every format.
						if f.Function != "" && !strings.HasPrefix(f.Function, "[") {
							s.kernelNamed++
							s.someKernel = f.Function
						}
					}
				}
			}
		}
	}
	return out
}

// Bounds of runAgentAs's waits.
const (
	agentRunTimeout  = 45 * time.Second
	agentStopTimeout = 30 * time.Second
)

// runAgentAs runs `rubyperf agent --match token` with attr's credentials,
// sending to col, until until says what arrived and its log are enough, it
// exits, or agentRunTimeout passes; then stops it with SIGTERM. It returns
// what col received from this run, per pid, its log, and its exit error.
func runAgentAs(t *testing.T, bin string, col *otelcoltest.Collector, token string, attr *syscall.SysProcAttr,
	until func(map[int]*agentSeen, string) bool) (map[int]*agentSeen, string, error) {
	t.Helper()
	before, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command(bin, "agent", "--endpoint", col.GRPCAddr, "--insecure", "--interval", "1s", "--flush-timeout", "10s", "--match", token)
	c.SysProcAttr, c.Dir = attr, "/"
	log := &testruby.Log{}
	c.Stderr = log
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	defer c.Process.Kill() // if the test fails on the way
	seen := func() map[int]*agentSeen { return receivedSince(t, col, len(before)) }
	var exit error
	exited := false
	for deadline := time.Now().Add(agentRunTimeout); time.Now().Before(deadline) && !until(seen(), log.String()); {
		select {
		case exit = <-done:
			exited = true
		case <-time.After(250 * time.Millisecond):
			continue
		}
		break
	}
	if !exited {
		c.Process.Signal(syscall.SIGTERM)
		select {
		case exit = <-done:
		case <-time.After(agentStopTimeout):
			c.Process.Kill()
			<-done
			t.Errorf("the agent still ran %s after SIGTERM; killed", agentStopTimeout)
		}
	}
	return seen(), log.String(), exit
}

// mappedLibruby is the libruby file process pid maps.
func mappedLibruby(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(filepath.Base(f[5]), "libruby") {
			return f[5]
		}
	}
	t.Fatalf("pid %d maps no libruby", pid)
	return ""
}

// sysctlInt reads a numeric sysctl.
func sysctlInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		testskip.Privileged(t, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}
