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
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestRecordUnderJIT: on every test Ruby built with YJIT or ZJIT, a process
// spinning in JIT-compiled code is recorded with the Ruby stack `snapshot`
// reads (checked against Ruby's own elsewhere) in every sample; its JIT
// code shows as perf shows it (the address, in /tmp/perf-PID.map), named
// after the method it runs, and native unwinding goes on through it to the
// thread's start.
func TestRecordUnderJIT(t *testing.T) {
	forEachJIT(t, jitCase{script: "jitloop.rb", hz: "499"}, func(t *testing.T, rec jitRecording) {
		samples := rec.samples
		if len(samples) < 200 {
			t.Fatalf("%d samples", len(samples))
		}
		// ZJIT calls Integer#+ as a C method: a sample may have it on top.
		want := strings.TrimPrefix(rec.want, "Integer#+ ")
		// The JIT frame is named after the innermost method Ruby reports:
		// JitLoop.inner, but JitLoop.outer on 3.3, whose rb_profile_frames
		// (and so snapshot) skips a frame JIT code pushed without a pc.
		jitName := "[JIT] " + strings.Fields(want)[0]
		right, wrong := 0, 0
		for _, s := range samples {
			if got := strings.Join(s.ruby, " "); got == want || got == "Integer#+ "+want {
				right++
			} else if wrong++; wrong <= 3 {
				t.Logf("a sample's Ruby stack: %s", got)
			}
		}
		inJIT, leaf, toStart := rec.throughJIT(jitName)
		t.Logf("%d samples: %d with the spinning Ruby stack %q, %d in JIT code named %s (%d at the leaf), %d of those unwind to the thread's start",
			len(samples), right, want, inJIT, jitName, leaf, toStart)
		// The process was already spinning when the recording began:
		// every sample is of the loop.
		if right != len(samples) {
			t.Errorf("%d of %d samples have the Ruby stack %q", right, len(samples), want)
		}
		// The loop runs in JIT code: YJIT's at the leaf, ZJIT's calling
		// C helpers.
		if inJIT*10 < len(samples)*9 {
			t.Errorf("only %d of %d samples have JIT code named %s (/tmp/perf-%d.map)", inJIT, len(samples), jitName, rec.pid)
		}
		if rec.JIT.Name == "yjit" && leaf*2 < len(samples) {
			t.Errorf("only %d of %d samples start in JIT code", leaf, len(samples))
		}
		// Unwinding through JIT code stops only where the stack copy ends.
		if toStart*100 < inJIT*95 {
			t.Errorf("%d of %d samples in JIT code unwind to the thread's start", toStart, inJIT)
		}
	})
}

// jitCase is what forEachJIT runs: testdata/ruby/script under each JIT of
// jits (nil: every one), with more interpreter flags (a Ruby that refuses
// them is passed over), recorded at hz.
type jitCase struct {
	script, hz string
	jits       []string
	flags      []string
}

// jitRecording is one Ruby of a jitCase, recorded.
type jitRecording struct {
	testruby.JITRun
	pid     int
	want    string // its Ruby stack as snapshot reads it: labels' first words, leaf first
	file    string // the recording
	samples []scriptFrames
}

// throughJIT counts the samples whose native stack has a JIT frame named
// name (in /tmp/perf-PID.map, as script prints JIT code), those where it is
// the leaf, and those that unwind through it to the thread's start: the
// executable's main, or _start when the executable is stripped as Debian's
// is.
func (rec jitRecording) throughJIT(name string) (inJIT, leaf, toStart int) {
	suffix := fmt.Sprintf(" %s (/tmp/perf-%d.map)", name, rec.pid)
	for _, s := range rec.samples {
		at := -1
		for i, n := range s.native {
			if strings.HasSuffix(n, suffix) {
				at = i
				break
			}
		}
		if at < 0 {
			continue
		}
		inJIT++
		if at == 0 {
			leaf++
		}
		for _, n := range s.native[at+1:] {
			if f := strings.Fields(n); len(f) > 1 && (f[1] == "main" || strings.HasPrefix(f[1], "main+") ||
				strings.HasPrefix(f[1], "_start+")) {
				toStart++
				break
			}
		}
	}
	return inJIT, leaf, toStart
}

// forEachJIT runs c on every test Ruby with each of its JITs: it waits until
// the script's stack settles, reads it with snapshot, records it for 2 s with
// record -p, and hands check that and what rubyperf script prints. It
// returns how many Rubies ran.
func forEachJIT(t *testing.T, c jitCase, check func(t *testing.T, rec jitRecording)) int {
	testskip.Privileged(t, bpf.Supported())
	path, err := filepath.Abs(filepath.Join("..", "..", "testdata", "ruby", c.script))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, r := range testruby.WithJIT(t, c.jits...) {
		if len(c.flags) > 0 && exec.Command(r.Exe, append(c.flags[:len(c.flags):len(c.flags)], "-e", "0")...).Run() != nil {
			continue
		}
		ran++
		t.Run(r.Name(), func(t *testing.T) {
			args := append(append(r.Args[:len(r.Args):len(r.Args)], c.flags...), path)
			cmd := testruby.Start(t, r.Ruby, args...)
			pid := strconv.Itoa(cmd.Process.Pid)
			var stdout, stderr bytes.Buffer
			// The script prints "ready" before it enters its loop: its stack
			// is the loop's once two snapshots agree and it is out of IO.
			var labels []string
			for try := 0; ; try++ {
				stdout.Reset()
				if code := run([]string{"snapshot", "-p", pid, "--format", "json"}, &stdout, &stderr); code != 0 {
					t.Fatalf("snapshot: exit %d: %s", code, stderr.String())
				}
				var doc snapshotJSON
				if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || len(doc.Threads) == 0 {
					t.Fatalf("snapshot: %v: %s", err, stdout.String())
				}
				var now []string
				for _, f := range doc.Threads[0].Frames {
					now = append(now, strings.Fields(f.Label)[0])
				}
				same := strings.Join(now, " ") == strings.Join(labels, " ")
				labels = now
				if same && !strings.HasPrefix(labels[0], "IO#") {
					break
				}
				if try == 50 {
					t.Fatalf("the script's stack did not settle: %v", labels)
				}
				time.Sleep(100 * time.Millisecond)
			}
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			record(t, "-F", c.hz, "-d", "2", "-o", out, "-p", pid)
			stdout.Reset()
			if code := run([]string{"script", "--native", "-i", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("script: exit %d: %s", code, stderr.String())
			}
			check(t, jitRecording{JITRun: r, pid: cmd.Process.Pid, want: strings.Join(labels, " "), file: out,
				samples: scriptSamples(stdout.String())})
		})
	}
	return ran
}

// TestYJITFramePush: YJIT 3.1 points ec->cfp at a new frame before it
// writes the frame, so a sample can catch a top frame holding what an
// earlier call left in that slot. Such a frame is reported unknown: no top
// frame may carry a label that is not the running method's.
func TestYJITFramePush(t *testing.T) {
	forEachJIT(t, jitCase{script: "jitcalls.rb", hz: "999", jits: []string{"yjit"}}, func(t *testing.T, rec jitRecording) {
		tops := map[string]int{}
		n := 0
		for _, s := range rec.samples {
			if len(s.ruby) > 0 {
				tops[s.ruby[0]]++
				n++
			}
		}
		t.Logf("top Ruby frames of %d samples: %v", n, tops)
		if n < 500 {
			t.Fatalf("only %d samples with Ruby frames", n)
		}
		for label, c := range tops {
			switch label {
			case "JitCalls.fib", "[unknown]", "Kernel#loop", "block": // "block in <main>"
			default:
				t.Errorf("%d samples have the top frame %q", c, label)
			}
		}
		if tops["JitCalls.fib"]*2 < n {
			t.Errorf("only %d of %d samples name JitCalls.fib on top", tops["JitCalls.fib"], n)
		}
	})
}

// scriptFrames is one sample of rubyperf script's output: its native
// frames ("ADDR SYMBOL (OBJECT)") and the first word of each Ruby frame's
// label, leaf first.
type scriptFrames struct{ native, ruby []string }

func scriptSamples(text string) []scriptFrames {
	var out []scriptFrames
	for _, block := range strings.Split(text, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if len(lines) < 2 {
			continue
		}
		var s scriptFrames
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < 3 {
				continue
			}
			if f[0] == "0" { // Ruby frames have no address
				s.ruby = append(s.ruby, f[1])
			} else {
				s.native = append(s.native, strings.Join(f, " "))
			}
		}
		out = append(out, s)
	}
	return out
}

// TestInjectBesideYJITPerfMap: a Ruby run with --yjit-perf (3.3+) writes
// its own /tmp/perf-PID.map and keeps frame pointers in JIT code. Our
// unwinding goes through that code, inject appends the Ruby methods after
// YJIT's lines (never truncating them), and stock perf script of the
// injected recording names both the JIT code (from YJIT's lines) and the
// Ruby methods (from ours).
func TestInjectBesideYJITPerfMap(t *testing.T) {
	c := jitCase{script: "jitloop.rb", hz: "499", jits: []string{"yjit"}, flags: []string{"--yjit-perf"}}
	ran := forEachJIT(t, c, func(t *testing.T, rec jitRecording) {
		mapFile := fmt.Sprintf("/tmp/perf-%d.map", rec.pid)
		t.Cleanup(func() { os.Remove(mapFile) })
		inJIT, _, toStart := rec.throughJIT("[JIT] " + strings.Fields(rec.want)[0])
		t.Logf("%d samples, %d in JIT code, %d of those unwind to the thread's start", len(rec.samples), inJIT, toStart)
		if inJIT*10 < len(rec.samples)*9 || toStart*100 < inJIT*95 {
			t.Errorf("with frame pointers in JIT code: %d of %d samples in JIT code, %d of those unwind to the start",
				inJIT, len(rec.samples), toStart)
		}

		before, err := os.ReadFile(mapFile)
		if err != nil || !bytes.Contains(before, []byte(" [JIT] ")) {
			t.Fatalf("YJIT's perf map %s: %v\n%.300s", mapFile, err, before)
		}
		merged := filepath.Join(filepath.Dir(rec.file), "merged.data")
		var stdout, stderr bytes.Buffer
		if code := run([]string{"inject", "--native", "-i", rec.file, "-o", merged}, &stdout, &stderr); code != 0 {
			t.Fatalf("inject: exit %d: %s", code, stderr.String())
		}
		after, err := os.ReadFile(mapFile)
		if err != nil || !bytes.HasPrefix(after, before) || !bytes.Contains(after, []byte(" JitLoop.outer\n")) {
			t.Fatalf("the perf map after inject does not keep YJIT's lines and add ours: %v\n%s", err, after)
		}
		perfOut, err := exec.Command("perf", "script", "-i", merged).Output()
		if err != nil {
			t.Fatalf("perf script: %v", err)
		}
		// (JitLoop.inner is missing on 3.3, whose rb_profile_frames skips it.)
		for _, want := range []string{" [JIT] ", " JitLoop.outer+0x0 ", " <main>+0x0 "} {
			if !bytes.Contains(perfOut, []byte(want)) {
				t.Errorf("perf script of the injected recording does not name %q:\n%.2000s", want, perfOut)
			}
		}
	})
	if ran == 0 {
		// 3.1 and 3.2 have no --yjit-perf; the 3.3 and 3.4 source builds have
		// it whenever rustc is there.
		testskip.IfNotSupported(t, testskip.Missing("a test Ruby with --yjit-perf",
			"scripts/test-rubies.sh builds 3.3 and 3.4 with YJIT when rustc is installed", nil))
	}
}
