package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/recording"
)

// collapsePerfScript folds perf script text by the rules stackcollapse-perf.pl
// applies (see shared/reference/perf-formats.md 3.2): a header line per
// sample with its period, frames "pc func (module)" with "+0x.." stripped
// and everything from the first '(' deleted, "[unknown]" named after its
// module, the comm as the root, weights summed by period.
func collapsePerfScript(t *testing.T, text []byte) map[string]uint64 {
	t.Helper()
	header := regexp.MustCompile(`^(\S.+?)\s+(\d+)/*(\d+)*\s+`)
	period := regexp.MustCompile(`:\s*(\d+)*\s+(\S+):\s*$`)
	frame := regexp.MustCompile(`^\s*(\w+)\s*(.+) \((.*)\)`)
	out := map[string]uint64{}
	var comm string
	var p uint64
	var frames []string
	flush := func() {
		if comm == "" {
			return
		}
		stack := []string{strings.ReplaceAll(comm, " ", "_")}
		for i := len(frames) - 1; i >= 0; i-- {
			stack = append(stack, frames[i])
		}
		out[strings.Join(stack, ";")] += p
		comm, frames = "", nil
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case comm == "" && header.MatchString(line):
			comm = header.FindStringSubmatch(line)[1]
			p = 1
			if m := period.FindStringSubmatch(line); m != nil && m[1] != "" {
				var v uint64
				for _, c := range m[1] {
					v = v*10 + uint64(c-'0')
				}
				p = v
			}
		default:
			m := frame.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			name := regexp.MustCompile(`\+0x[0-9a-f]+$`).ReplaceAllString(m[2], "")
			if i := strings.Index(name, "("); i >= 0 {
				name = name[:i]
			}
			if name == "[unknown]" && m[3] != "" && m[3] != "[unknown]" { // as stackcollapse-perf.pl
				name = "[" + filepath.Base(m[3]) + "]"
			}
			name = strings.NewReplacer(";", ":", `"`, "", "'", "").Replace(name)
			frames = append(frames, name)
		}
	}
	flush()
	return out
}

// TestScriptFeedsFlameGraphTools: folding rubyperf script's text the way
// stackcollapse-perf.pl does gives exactly the merged stacks and periods of
// the recording: every Ruby name survives whole.
func TestScriptFeedsFlameGraphTools(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "source-3.3-static")
	script, _ := filepath.Abs("../../testdata/ruby/workload.rb")
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	if _, err := recording.Record(context.Background(), recording.Options{
		Command: []string{r.Exe, script, "30"}, Frequency: 199, Duration: 2 * time.Second, Output: out}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"script", "-i", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("script: exit %d: %s", code, stderr.String())
	}
	got := collapsePerfScript(t, stdout.Bytes())
	want := map[string]uint64{}
	rubyNames := 0
	_, err := readback.ReadStacks(out, readback.ReadOptions{}, func(s merge.Stack) error {
		comm := s.Comm
		if comm == "" {
			comm = fmt.Sprintf(":%d", s.TID) // as script prints a thread without a name
		}
		stack := []string{strings.ReplaceAll(comm, " ", "_")}
		for i := len(s.Frames) - 1; i >= 0; i-- {
			f := s.Frames[i]
			name := scriptName(f.Name)
			if name == "[unknown]" && f.Kind == merge.KindNative {
				name = "[" + filepath.Base(f.File) + "]"
			} else if f.Kind == merge.KindKernel && name == "[unknown]" {
				name = "[[kernel.kallsyms]]"
			}
			if f.Kind == merge.KindRuby {
				rubyNames++
			}
			stack = append(stack, name)
		}
		want[strings.Join(stack, ";")] += s.Period
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 5 || rubyNames == 0 {
		t.Fatalf("only %d distinct stacks, %d Ruby frames", len(want), rubyNames)
	}
	var diff []string
	for k, v := range want {
		if got[k] != v {
			diff = append(diff, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, "unexpected: "+k)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%d stacks differ, e.g.\n%s", len(diff), strings.Join(diff[:min(3, len(diff))], "\n"))
	}
}
