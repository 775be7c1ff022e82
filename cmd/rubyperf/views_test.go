package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/recording"
)

// TestViewsOfStrippedRuby records the bundled workload on Debian's
// stripped Ruby and reads it in each view. The default view reads like the
// Ruby program: between two Ruby frames there is no frame of libruby,
// named or not, and a C method calling back into Ruby (Kernel#loop) sits
// right under the block it calls. --native shows the interpreter's frames
// between them. A sample whose native unwinding stopped early hangs under
// one root that says so, and the counts agree.
func TestViewsOfStrippedRuby(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.1")
	script, _ := filepath.Abs("../../testdata/ruby/workload.rb")
	file := filepath.Join(t.TempDir(), "rubyperf.data")
	if _, err := recording.Record(context.Background(), recording.Options{
		Command: []string{r.Exe, script, "4"}, Frequency: 499, Duration: 6 * time.Second, Output: file}); err != nil {
		t.Fatal(err)
	}
	libruby := ""
	type view struct {
		stacks []merge.Stack
		stats  *readback.ReadStats
	}
	read := func(v merge.View) view {
		var out view
		var err error
		out.stats, err = readback.ReadStacks(file, readback.ReadOptions{Merge: merge.Options{View: v}}, func(s merge.Stack) error {
			s.Frames = slices.Clone(s.Frames)
			out.stacks = append(out.stacks, s)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	isRuby := func(f merge.Frame) bool { return f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc }
	// between returns the frames between the outermost and innermost Ruby
	// frames of s that are not Ruby frames.
	between := func(s merge.Stack) []merge.Frame {
		first, last := -1, -1
		for i, f := range s.Frames {
			if isRuby(f) {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		var out []merge.Frame
		for i := first + 1; i < last && first >= 0; i++ {
			if !isRuby(s.Frames[i]) {
				out = append(out, s.Frames[i])
			}
		}
		return out
	}
	// calls says whether s has caller right under callee, root to leaf.
	calls := func(frames []merge.Frame, caller, callee string) bool {
		for i := 1; i < len(frames); i++ {
			if frames[i].Name == caller && frames[i-1].Name == callee {
				return true
			}
		}
		return false
	}
	checkIncomplete := func(name string, v view) {
		n := 0
		for _, s := range v.stacks {
			if len(s.Frames) == 0 {
				t.Errorf("%s: a stack without frames (incomplete %v, fallback %v)", name, s.Incomplete, s.Fallback)
				continue
			}
			root := s.Frames[len(s.Frames)-1].Name == merge.IncompleteName
			if s.Incomplete != root {
				t.Errorf("%s: stack incomplete %v, root %q", name, s.Incomplete, s.Frames[len(s.Frames)-1].Name)
			}
			if s.Incomplete {
				n++
			}
		}
		if n != v.stats.Incomplete {
			t.Errorf("%s: %d stacks under %s, stats count %d", name, n, merge.IncompleteName, v.stats.Incomplete)
		}
	}

	def := read(merge.ViewRuby)
	if len(def.stacks) < 300 {
		t.Fatalf("%d samples, want at least 300", len(def.stacks))
	}
	loopCallsBlock := 0
	for _, s := range def.stacks {
		for _, f := range between(s) {
			if strings.Contains(filepath.Base(f.File), "libruby") {
				t.Fatalf("default view: %s (%s) between Ruby frames in %s", f.Name, f.File, render(s))
			}
		}
		if calls(s.Frames, "Kernel#loop", "block (2 levels) in <main>") {
			loopCallsBlock++
		}
	}
	if loopCallsBlock < len(def.stacks)/10 {
		t.Errorf("default view: Kernel#loop calls its block directly in %d of %d samples", loopCallsBlock, len(def.stacks))
	}
	checkIncomplete("default", def)

	native := read(merge.ViewNative)
	unnamed := 0
	for _, s := range native.stacks {
		for _, f := range between(s) {
			if strings.Contains(filepath.Base(f.File), "libruby") {
				libruby = f.File
				if f.Name == "[unknown]" {
					unnamed++
				}
			}
		}
	}
	if libruby == "" || unnamed == 0 {
		t.Errorf("--native: no unnamed libruby frame between Ruby frames in %d samples", len(native.stacks))
	}
	checkIncomplete("native", native)

	rubyOnly := read(merge.ViewRubyOnly)
	for _, s := range rubyOnly.stacks {
		rubySeen := false
		for _, f := range s.Frames {
			// A thread state's pseudo-frames sit above the innermost Ruby
			// frame, nowhere else.
			if f.Kind == merge.KindState && !rubySeen {
				continue
			}
			rubySeen = true
			if !isRuby(f) {
				t.Fatalf("--ruby-only: %s (%v) in %s", f.Name, f.Kind, render(s))
			}
		}
	}
	if rubyOnly.stats.Incomplete != 0 {
		t.Errorf("--ruby-only: %d incomplete stacks, want none (the Ruby stack is whole)", rubyOnly.stats.Incomplete)
	}

	t.Run("report", func(t *testing.T) { checkReport(t, file, def.stats) })
}

// checkReport reads the recording with report as a user in an 80-column
// terminal would: Ruby methods with file:line first, then C methods, then
// native functions, every line within the terminal, the incomplete
// samples counted; --threads gives each thread its tables.
func checkReport(t *testing.T, file string, stats *readback.ReadStats) {
	t.Setenv("COLUMNS", "80")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"report", "-i", file, "-n", "8"}, &stdout, &stderr); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines[1:] { // the first line names the file, whatever its length
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("a line of %d columns in an 80-column terminal: %q", n, l)
		}
	}
	var order []string
	for _, l := range lines {
		if strings.HasPrefix(l, "## ") {
			order = append(order, strings.Fields(l)[1])
		}
	}
	if o := strings.Join(order, " "); o != "Ruby C native" && o != "Ruby C native thread" {
		t.Errorf("tables %q, want Ruby methods, C methods, native functions:\n%s", order, out)
	}
	if !regexp.MustCompile(`(?m)^ *[0-9.]+% +[0-9.]+% +Fib\.fib +\S*workload\.rb:\d+$`).MatchString(out) {
		t.Errorf("no row for Fib.fib with its file:line:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^ *[0-9.]+% +[0-9.]+% +JSON::Ext::Generator::State#generate$`).MatchString(out) {
		t.Errorf("no row for the C method JSON::Ext::Generator::State#generate:\n%s", out)
	}
	if stats.Incomplete > 0 && !strings.Contains(lines[0], fmt.Sprintf("%d (", stats.Incomplete)) {
		t.Errorf("first line does not count the %d incomplete samples: %q", stats.Incomplete, lines[0])
	}
	stdout.Reset()
	if code := run([]string{"report", "-i", file, "--threads", "-n", "3"}, &stdout, &stderr); code != 0 {
		t.Fatalf("report --threads: exit %d: %s", code, stderr.String())
	}
	// Tables of named threads: the main thread's and serializer's. (A
	// sample the kernel took as a thread exited carries tid -1; its
	// payload names the thread, and one without a payload gets an
	// unnamed table of its own, not counted here.)
	named := regexp.MustCompile(`(?m)^# thread \d+ "[^"]+" \(pid`).FindAllString(stdout.String(), -1)
	if len(named) != 2 || !strings.Contains(stdout.String(), `"serializer" (pid`) {
		t.Errorf("report --threads: %d tables of named threads, want the main thread's and serializer's:\n%s", len(named), stdout.String())
	}
}

// render is a stack root first, for failure messages.
func render(s merge.Stack) string {
	var b strings.Builder
	for i := len(s.Frames) - 1; i >= 0; i-- {
		b.WriteString(s.Frames[i].Name)
		if i > 0 {
			b.WriteByte(';')
		}
	}
	return b.String()
}
