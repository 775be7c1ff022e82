package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/procstat"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/symtab"
)

// Faults of the target while it is recorded: each recording is valid (stock
// perf script shows every sample the summary counts), every sample before
// the fault is there, and the summary says what happened.

// scriptSampleText is one sample of `rubyperf script`: the thread and its
// frames' lines, leaf first.
type scriptSampleText struct {
	tid    int
	frames []string
}

var scriptSampleHeader = regexp.MustCompile(`^\S.*?\s(\d+)\s+\[\d+\]\s`)

// threadSamples runs `rubyperf script ARGS -i file` and splits its samples.
func threadSamples(t *testing.T, file string, args ...string) []scriptSampleText {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append(append([]string{"script"}, args...), "-i", file), &stdout, &stderr); code != 0 {
		t.Fatalf("script %v -i %s: exit %d: %s", args, file, code, stderr.String())
	}
	var out []scriptSampleText
	for _, line := range strings.Split(stdout.String(), "\n") {
		if m := scriptSampleHeader.FindStringSubmatch(line); m != nil {
			tid, _ := strconv.Atoi(m[1])
			out = append(out, scriptSampleText{tid: tid})
		} else if s := strings.TrimSpace(line); s != "" && len(out) > 0 {
			out[len(out)-1].frames = append(out[len(out)-1].frames, s)
		}
	}
	return out
}

func (s scriptSampleText) has(name string) bool {
	for _, f := range s.frames {
		if strings.Contains(f, name) {
			return true
		}
	}
	return false
}

func rubyScript(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("../../testdata/ruby", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkValid: stock perf script reads every sample the summary counts.
func checkValid(t *testing.T, file string, sum summary) {
	t.Helper()
	if n := len(perfScript(t, file)); n != sum.samples {
		// Keep what it takes to see which sample perf script did not show.
		kept := filepath.Join(os.TempDir(), fmt.Sprintf("rubyperf-%s-%d.data", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
		raw, _ := exec.Command(perfBinary(t), "script", "-F", "comm,pid,tid,time,event", "-i", file).CombinedOutput()
		if b, err := os.ReadFile(file); err != nil || os.WriteFile(kept, b, 0o600) != nil {
			kept = "not kept"
		}
		t.Errorf("perf script shows %d samples, rubyperf reported %d (file kept: %s); perf script's last lines:\n%s",
			n, sum.samples, kept, lastLines(string(raw), 5))
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestTargetExecs: a target that execs is another program from that
// instant. Exec'ing a Ruby, the new image is attached again and named
// through its own memory; exec'ing anything else, it is no longer sampled,
// and the recording of a started command goes on until the command exits.
func TestTargetExecs(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	script := rubyScript(t, "execs.rb")
	t.Run("ruby", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "rubyperf.data")
		second := `def second_image; t = Time.now; nil while Time.now - t < 1.5; end; second_image`
		sum, stderr := recordOutput(t, "-F", "499", "-o", out, "--", r.Exe, script, r.Exe, "1.5", "-e", second)
		if !strings.Contains(stderr, "exec'd") || !strings.Contains(stderr, "recording the new Ruby") {
			t.Errorf("the summary does not say the target exec'd a Ruby: %s", stderr)
		}
		checkValid(t, out, sum)
		first, secondN := 0, 0
		for _, s := range threadSamples(t, out, "--ruby-only") {
			a, b := s.has("first_image"), s.has("second_image")
			if a && b {
				t.Fatalf("one sample names both images: %v", s.frames)
			}
			if a {
				first++
			}
			if b {
				secondN++
			}
		}
		t.Logf("%d samples: %d in first_image, %d in second_image, %d unknown frames", sum.samples, first, secondN, sum.unknown)
		// 499 Hz for 1.5 s each (less on a busy machine, where each gets a
		// share of a CPU); re-attaching costs the new image's first 0.1-0.3 s.
		if first < 150 || secondN < 100 {
			t.Errorf("%d samples in first_image, %d in second_image", first, secondN)
		}
		// The samples of the old image read after the exec keep their
		// frames unnamed (they cannot be read through the new one).
		if nn := parseNotNamed(t, stderr); nn.samples > max(sum.samples/100, 10) {
			t.Errorf("%d of %d samples have frames without a name", nn.samples, sum.samples)
		}
	})
	t.Run("not ruby", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "rubyperf.data")
		start := time.Now()
		sum, stderr := recordOutput(t, "-F", "499", "-o", out, "--", r.Exe, script, "sleep", "1", "3")
		took := time.Since(start)
		if !strings.Contains(stderr, "exec'd sleep") || !strings.Contains(stderr, "not a Ruby") {
			t.Errorf("the summary does not say the target exec'd sleep: %s", stderr)
		}
		if strings.Contains(stderr, "SIGTERM") || took < 3500*time.Millisecond {
			t.Errorf("the command was ended after %v, before it exited: %s", took, stderr)
		}
		checkValid(t, out, sum)
		first := 0
		for _, s := range threadSamples(t, out, "--ruby-only") {
			if s.has("first_image") {
				first++
			}
		}
		// The few samples in flight at the exec, read once the old image
		// is gone, keep their frames unnamed.
		nn := parseNotNamed(t, stderr)
		if first < 150 || nn.samples > max(sum.samples/100, 10) {
			t.Errorf("%d samples in first_image of %d, %d with frames without a name", first, sum.samples, nn.samples)
		}
	})
}

// TestTargetForks: a child the target forks is not recorded, unless
// --follow-forks; followed, its samples are its own (its pid, its frames)
// from its start, and never the parent's.
func TestTargetForks(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	script := rubyScript(t, "forks.rb")
	for _, follow := range []bool{false, true} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			args := []string{"-F", "499", "-o", out}
			if follow {
				args = append(args, "--follow-forks")
			}
			sum, stderr := recordOutput(t, append(args, "--", r.Exe, script, "1.5")...)
			checkValid(t, out, sum)
			byTID := map[int][2]int{} // parent_work, child_work samples
			for _, s := range threadSamples(t, out, "--ruby-only") {
				c := byTID[s.tid]
				if s.has("parent_work") {
					c[0]++
				}
				if s.has("child_work") {
					c[1]++
				}
				byTID[s.tid] = c
			}
			t.Logf("samples by thread (parent_work, child_work): %v; %s", byTID, stderr)
			var parents, children []int
			for tid, c := range byTID {
				if c[0] > 0 && c[1] > 0 {
					t.Errorf("thread %d has samples of both parent_work and child_work", tid)
				}
				if c[0] > 0 {
					parents = append(parents, tid)
				}
				if c[1] > 0 {
					children = append(children, tid)
				}
			}
			// 1.5 s at 499 Hz each; on a busy machine, a share of a CPU.
			if len(parents) != 1 || byTID[parents[0]][0] < 150 {
				t.Errorf("parent_work samples by thread: %v", byTID)
			}
			switch {
			case !follow && len(children) > 0:
				t.Errorf("the child was recorded without --follow-forks: %v", byTID)
			case follow && (len(children) != 1 || byTID[children[0]][1] < 150):
				t.Errorf("child_work samples by thread: %v", byTID)
			case follow && !strings.Contains(stderr, "forked pid"):
				t.Errorf("the summary does not say the target forked: %s", stderr)
			}
			// A few samples of Ruby's start-up, whose frames are gone
			// before they are read: at most 1% of samples, or 5. Counted
			// by sample, as one such stack holds several (CI runs on a
			// loaded machine: 6 frames of 401 samples; 11 frames in 3
			// samples of 719).
			unnamed := 0
			if m := unnamedSamples.FindStringSubmatch(stderr); m != nil {
				unnamed, _ = strconv.Atoi(m[1])
			}
			if unnamed > max(sum.samples/100, 5) {
				t.Errorf("%d of %d samples have unnamed frames (%d unknown frames)", unnamed, sum.samples, sum.unknown)
			}
		})
	}
}

// unnamedSamples finds record's count of samples with frames it could not
// name.
var unnamedSamples = regexp.MustCompile(`(\d+) of \d+ samples \([0-9.]+%\) have Ruby frames without a name`)

// TestTargetThreadChurn: a target that starts and ends 3000 threads, 50
// at a time, loses no sample, and their frames are named.
func TestTargetThreadChurn(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	sum := record(t, "-F", "999", "-o", out, "--", r.Exe, rubyScript(t, "churn.rb"), "3000")
	checkValid(t, out, sum)
	tids := map[int]bool{}
	work := 0
	for _, s := range threadSamples(t, out, "--ruby-only") {
		tids[s.tid] = true
		if s.has("Object#churn_work") {
			work++
		}
	}
	t.Logf("%d samples, %d lost, %d threads sampled, %d in churn_work, %d unknown frames", sum.samples, sum.lost, len(tids), work, sum.unknown)
	// Ruby 3.1 runs new threads on the native threads of ended ones (its
	// thread cache): 50 at a time make some 50 native threads.
	if sum.lost > 0 || len(tids) < 40 || work*2 < sum.samples || sum.unknown*100 > sum.samples {
		t.Errorf("%d samples, %d lost, %d threads, %d in churn_work, %d unknown frames", sum.samples, sum.lost, len(tids), work, sum.unknown)
	}
}

// TestTargetDeepRecursion: a 10,000-deep Ruby stack is more than a sample
// carries (payload.MaxFrames): the summary counts truncated stacks, and each
// shows its innermost frames under a root that says it was cut.
func TestTargetDeepRecursion(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.1")
	cmd := exec.Command(r.Exe, "-e", `def down(n) = n.zero? ? (puts "ready"; STDOUT.flush; loop { }) : down(n - 1); down(10_000)`)
	cmd.Env = append(os.Environ(), "RUBY_THREAD_VM_STACK_SIZE=16777216")
	target, _ := testruby.StartCommand(t, cmd)
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	sum := record(t, "-F", "199", "-d", "2", "-o", out, "-p", strconv.Itoa(target.Process.Pid))
	checkValid(t, out, sum)
	if sum.truncated == 0 || sum.truncated*10 < sum.samples*9 {
		t.Errorf("%d of %d stacks truncated", sum.truncated, sum.samples)
	}
	samples := threadSamples(t, out, "--ruby-only")
	for i, s := range samples {
		if len(s.frames) != payload.MaxFrames+1 || !strings.Contains(s.frames[len(s.frames)-1], merge.TruncatedName) ||
			!strings.Contains(s.frames[len(s.frames)-2], "Object#down") {
			t.Fatalf("sample %d: %d frames, ending %q", i, len(s.frames), s.frames[max(0, len(s.frames)-2):])
		}
	}
}

// TestTargetCompacted: GC.compact moves iseqs and method entries while they
// are sampled; every frame is still named after the code that ran.
func TestTargetCompacted(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	target := testruby.Start(t, r, rubyScript(t, "compact.rb"), "30")
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	sum := record(t, "-F", "999", "-d", "4", "-o", out, "-p", strconv.Itoa(target.Process.Pid))
	checkValid(t, out, sum)
	pair := regexp.MustCompile(`Pairs\.(?:outer|inner)_(\d+) \(pairs\.rb:(\d+)\)`)
	named, bad := numberedCode(t, threadSamples(t, out, "--ruby-only"), pair)
	t.Logf("%d samples, %d pairs named, %d inconsistent, %d unknown frames", sum.samples, len(named), bad, sum.unknown)
	if bad > 0 || len(named) < 50 {
		t.Errorf("%d inconsistent samples, %d pairs named", bad, len(named))
	}
}

// numberedCode checks samples of code numbered N whose frames (matching re:
// the number, then the line) lie on lines N*10+1..N*10+9: it says which
// numbers were named, and counts the samples that name code of more than one
// number or a line outside its number's, showing the first few.
func numberedCode(t *testing.T, samples []scriptSampleText, re *regexp.Regexp) (named map[int]bool, bad int) {
	t.Helper()
	named = map[int]bool{}
	for _, s := range samples {
		ns := map[int]bool{}
		for _, f := range s.frames {
			if m := re.FindStringSubmatch(f); m != nil {
				n, _ := strconv.Atoi(m[1])
				line, _ := strconv.Atoi(m[2])
				ns[n] = true
				if line < n*10+1 || line > n*10+9 {
					ns[-1] = true
				}
			}
		}
		if len(ns) > 1 {
			if bad++; bad <= 3 {
				t.Errorf("a sample names code of more than one number, or a line outside it: %v", s.frames)
			}
		}
		for n := range ns {
			if n >= 0 {
				named[n] = true
			}
		}
	}
	return named, bad
}

// TestTargetKilled: a target SIGKILLed while recorded ends the recording;
// the file is valid and has its samples.
func TestTargetKilled(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	target := testruby.Start(t, r, workload(t), "60")
	go func() {
		time.Sleep(2 * time.Second)
		target.Process.Signal(syscall.SIGKILL)
	}()
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	start := time.Now()
	sum, stderr := recordOutput(t, "-F", "499", "-d", "30", "-o", out, "-p", strconv.Itoa(target.Process.Pid))
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the recording went on %v after its target was killed", d)
	}
	if !strings.Contains(stderr, "ended when its last target was gone") {
		t.Errorf("the summary does not say the target went: %s", stderr)
	}
	checkValid(t, out, sum)
	// Two seconds of two busy threads, less the attach: about 1,000 on a
	// quiet machine, 242 in one CI run on a busy one.
	if sum.samples < 100 {
		t.Errorf("%d samples before the kill", sum.samples)
	}
}

// TestTargetNotRecordable: a process that is not a Ruby, a zombie, and a
// pid that does not exist are each refused in one line naming the pid,
// exit status 1, with no file left behind.
func TestTargetNotRecordable(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	// A zombie: a child that exited, whose parent (sleep, after exec) never
	// waits for it.
	parent := exec.Command("sh", "-c", "true & exec sleep 30")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Process.Kill(); parent.Wait() })
	zombie := 0
	for deadline := time.Now().Add(5 * time.Second); zombie == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent.Process.Pid, parent.Process.Pid))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if st, err := procstat.Fields(pid); err == nil && st[procstat.State] == "Z" {
				zombie = pid
			}
		}
	}
	if zombie == 0 {
		t.Fatal("no zombie to record")
	}
	for name, pid := range map[string]int{"not ruby": sleeper.Process.Pid, "zombie": zombie, "no such process": 1 << 22} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			var stdout, stderr bytes.Buffer
			code := run([]string{"record", "-d", "1", "-o", out, "-p", strconv.Itoa(pid)}, &stdout, &stderr)
			msg := strings.TrimSpace(stderr.String())
			if code != 1 || strings.Contains(msg, "\n") || !strings.Contains(msg, fmt.Sprintf("pid %d", pid)) {
				t.Errorf("exit %d, %q: want exit 1 and one line naming pid %d", code, msg, pid)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was left behind", out)
			}
			t.Log(msg)
		})
	}
}

// TestTargetExitsDuringAttach: Rubies that exit while being attached (a
// few ms after they start, at different moments) give a valid recording
// or a one-line error naming the pid, never a crash or a hang.
func TestTargetExitsDuringAttach(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.1")
	bin := rubyperfBinary(t)
	outcomes := map[string]int{}
	for i := 0; i < 8; i++ {
		spin := fmt.Sprintf(`t = Time.now; nil while Time.now - t < %g`, 0.02*float64(i))
		target := exec.Command(r.Exe, "-e", spin)
		if err := target.Start(); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "rubyperf.data")
		c := exec.Command(bin, "record", "-d", "5", "-o", out, "-p", strconv.Itoa(target.Process.Pid))
		var stderr bytes.Buffer
		c.Stderr = &stderr
		done := make(chan error, 1)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- c.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			c.Process.Kill()
			t.Fatalf("record -p of a Ruby exiting after %s hung", spin)
		}
		target.Wait()
		msg := strings.TrimSpace(stderr.String())
		switch ee, _ := err.(*exec.ExitError); {
		case err == nil:
			outcomes["recorded"]++
			sum := parseSummary(t, msg)
			checkValid(t, out, sum)
		case ee != nil && ee.ExitCode() == 1 && !strings.Contains(msg, "\n") &&
			strings.Contains(msg, fmt.Sprintf("pid %d", target.Process.Pid)):
			outcomes["refused"]++
			t.Logf("refused: %s", msg)
		default:
			t.Errorf("record -p of a Ruby exiting after %s: %v: %q", spin, err, msg)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// roundFrame is a frame of testdata/ruby/reuse.rb's round N: its methods'
// names carry N, and their lines lie in N*10+1..N*10+9.
var roundFrame = regexp.MustCompile(`Rounds\.(?:outer|inner)_(\d+) \(rounds\.rb:(\d+)\)`)

// TestTargetReusesAddresses: code freed and replaced at the same addresses
// round after round (method pairs defined by eval, run 2 ms, removed, then
// GC and GC.compact) is never named as the code that was there before.
// Every Ruby whose layout gives GC stamps must name no sample wrongly: a
// frame it cannot prove reads as symtab.ReplacedLabel. One without says
// so in one line at the start.
func TestTargetReusesAddresses(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			sum, stderr := recordOutput(t, "-F", "999", "-o", out, "--", r.Exe, rubyScript(t, "reuse.rb"), "4")
			if strings.Contains(stderr, "no GC stamps") {
				if r.DWARF {
					t.Fatalf("%s carries DWARF, yet its recording has no GC stamps: %s", r.VM, stderr)
				}
				if !regexp.MustCompile(`rubyperf: pid \d+ \(.*\): no GC stamps \(.+\): a frame whose code is freed`).MatchString(stderr) {
					t.Errorf("the line saying there are no GC stamps does not name the pid and why: %s", stderr)
				}
				t.Logf("%s: no GC stamps (a stripped build whose table predates them): names are not checked", r.Name)
				return
			}
			samples := threadSamples(t, out, "--ruby-only")
			rounds, bad := numberedCode(t, samples, roundFrame)
			replaced := 0
			for _, s := range samples {
				if s.has(symtab.ReplacedLabel) {
					replaced++
				}
			}
			t.Logf("%d samples, %d rounds named, %d inconsistent, %d with frames not named for them", len(samples), len(rounds), bad, replaced)
			checkValid(t, out, sum)
			if bad > 0 || len(rounds) < 20 {
				t.Errorf("%d inconsistent samples, %d rounds named", bad, len(rounds))
			}
		})
	}
}

// TestFramesNamedForTheirSamples: a program that allocates all the time
// (hundreds of GCs a second) still has nearly every frame named for its
// sample: names of old code hold until the next major GC, and a sample
// whose frames are not named for its GC interval wakes the recorder.
func TestFramesNamedForTheirSamples(t *testing.T) {
	r := testruby.WithDWARF(t)[0]
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	sum := record(t, "-F", "999", "-o", out, "--", r.Exe, workload(t), "4")
	samples := threadSamples(t, out, "--ruby-only")
	replaced := 0
	for _, s := range samples {
		if s.has(symtab.ReplacedLabel) {
			replaced++
		}
	}
	t.Logf("%s: %d of %d samples have a frame not named for them", r.Name, replaced, len(samples))
	checkValid(t, out, sum)
	if len(samples) < 1000 || float64(replaced) > 0.1*float64(len(samples)) {
		t.Errorf("%d of %d samples have a frame not named for them", replaced, len(samples))
	}
}
