package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestRecordUnderYJIT: on every test Ruby built with YJIT, a process
// spinning in JIT-compiled code is recorded with the right Ruby stack in
// every sample, and its native stack starts in the JIT code, shown as perf
// shows it (the address, in /tmp/perf-PID.map).
func TestRecordUnderYJIT(t *testing.T) {
	testruby.Privileged(t, bpf.Supported())
	t.Setenv("RUBYPERF_EXPECT_YJIT", "1")
	script, err := filepath.Abs("../../testdata/ruby/jitloop.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.WithYJIT(t) {
		t.Run(r.Name, func(t *testing.T) {
			flags, _ := testruby.YJITArgs(r)
			cmd := testruby.Start(t, r, append(flags, script)...)
			pid := cmd.Process.Pid
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			sum := record(t, "-F", "499", "-d", "2", "-o", out, "-p", strconv.Itoa(pid))
			var stdout, stderr bytes.Buffer
			if code := run([]string{"script", "-i", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("script: exit %d: %s", code, stderr.String())
			}
			samples := scriptSamples(stdout.String())
			if len(samples) < 200 {
				t.Fatalf("%d samples (summary %+v)", len(samples), sum)
			}
			want := "JitLoop.inner JitLoop.outer <main> <main>"
			jitMap := fmt.Sprintf("(/tmp/perf-%d.map)", pid)
			right, inJIT := 0, 0
			for _, s := range samples {
				if got := strings.Join(s.ruby, " "); got == want {
					right++
				} else if right == 0 {
					t.Logf("a sample's Ruby stack: %s", got)
				}
				if len(s.native) > 0 && strings.HasSuffix(s.native[0], jitMap) {
					inJIT++
				}
			}
			t.Logf("%d samples: %d with the spinning Ruby stack, %d with the leaf in JIT code", len(samples), right, inJIT)
			// The process was already spinning when the recording began:
			// every sample is of the loop.
			if right != len(samples) {
				t.Errorf("%d of %d samples have the Ruby stack %q", right, len(samples), want)
			}
			if inJIT*2 < len(samples) {
				t.Errorf("only %d of %d samples start in JIT code %s", inJIT, len(samples), jitMap)
			}
		})
	}
}

// TestYJITFramePush: YJIT 3.1 points ec->cfp at a new frame before it
// writes the frame, so a sample can catch a top frame holding what an
// earlier call left in that slot. Such a frame is reported unknown: no top
// frame may carry a label that is not the running method's.
func TestYJITFramePush(t *testing.T) {
	testruby.Privileged(t, bpf.Supported())
	script, err := filepath.Abs("../../testdata/ruby/jitcalls.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.WithYJIT(t) {
		t.Run(r.Name, func(t *testing.T) {
			flags, _ := testruby.YJITArgs(r)
			cmd := testruby.Start(t, r, append(flags, script)...)
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			record(t, "-F", "999", "-d", "2", "-o", out, "-p", strconv.Itoa(cmd.Process.Pid))
			var stdout, stderr bytes.Buffer
			if code := run([]string{"script", "-i", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("script: exit %d: %s", code, stderr.String())
			}
			tops := map[string]int{}
			n := 0
			for _, s := range scriptSamples(stdout.String()) {
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
