package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
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

// workloadRecording records the bundled workload on the stripped 3.3.8 Ruby.
func workloadRecording(tb testing.TB, d time.Duration) (file string, pid int) {
	tb.Helper()
	testskip.Privileged(tb, bpf.Supported())
	r := testruby.Get(tb, "source-3.3-static-stripped")
	script, _ := filepath.Abs("../../testdata/ruby/workload.rb")
	file = filepath.Join(tb.TempDir(), "rubyperf.data")
	sum, err := recording.Record(context.Background(), recording.Options{
		Command: []string{r.Exe, script, "30"}, Frequency: 499, Duration: d, Output: file})
	if err != nil {
		tb.Fatal(err)
	}
	// The workload runs for 30 s, past the recording: stop it with the
	// test, or it keeps running, and holds go test's output open, until then.
	tb.Cleanup(func() {
		if p, err := os.FindProcess(sum.PIDs[0]); err == nil {
			p.Kill()
		}
	})
	return file, sum.PIDs[0]
}

// TestConvertAndInject: every output of one recording opens in the tool it
// is for: go tool pprof reads the pprof, stock perf report names Ruby
// methods in the injected perf.data through /tmp/perf-PID.map.
func TestConvertAndInject(t *testing.T) {
	file, pid := workloadRecording(t, 2*time.Second)
	top := topRubyNames(t, file, 3)
	dir := t.TempDir()
	for _, f := range []string{"folded", "pprof", "speedscope", "svg"} {
		var stdout, stderr bytes.Buffer
		out := filepath.Join(dir, "out."+f)
		if code := run([]string{"convert", "-i", file, "-f", f, "-o", out}, &stdout, &stderr); code != 0 {
			t.Fatalf("convert -f %s: exit %d: %s", f, code, stderr.String())
		}
		b, err := os.ReadFile(out)
		if err != nil || len(b) == 0 {
			t.Fatalf("convert -f %s wrote nothing: %v", f, err)
		}
		// The SVG escapes names as XML text ("block in &lt;main&gt;").
		xmlText := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
		if f != "pprof" && !bytes.Contains(b, []byte(top[0])) && !bytes.Contains(b, []byte(xmlText.Replace(top[0]))) {
			t.Errorf("%s output does not name %s", f, top[0])
		}
	}
	pp, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=200", filepath.Join(dir, "out.pprof")).CombinedOutput()
	if err != nil || !strings.Contains(string(pp), top[0]) {
		t.Errorf("go tool pprof -top does not list %s: %v\n%s", top[0], err, pp)
	}

	mapFile := fmt.Sprintf("/tmp/perf-%d.map", pid)
	t.Cleanup(func() { os.Remove(mapFile) })
	injected := filepath.Join(dir, "injected.data")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"inject", "-i", file, "-o", injected}, &stdout, &stderr); code != 0 {
		t.Fatalf("inject: exit %d: %s", code, stderr.String())
	}
	rep, err := exec.Command("perf", "report", "--stdio", "--children", "--sort", "sym", "-g", "none", "-i", injected).CombinedOutput()
	if err != nil {
		t.Fatalf("perf report: %v\n%s", err, rep)
	}
	// The Ruby methods on most stacks, as rubyperf reads the recording, must
	// be what stock perf reports for the injected file.
	for _, want := range top {
		if !strings.Contains(string(rep), want) {
			t.Errorf("perf report of the injected file does not list %s", want)
		}
	}
	scr, err := exec.Command("perf", "script", "-F", "ip,sym,dso", "-i", injected).Output()
	if err != nil || !strings.Contains(string(scr), top[0]+" (/tmp/perf-") {
		t.Errorf("perf script of the injected file: %v", err)
	}
	// Stock perf inject rewrites the file (as a user adding build-ids
	// would): it crashes on a feature it does not know, so the injected
	// file carries none.
	again := filepath.Join(dir, "again.data")
	if out, err := exec.Command("perf", "inject", "-i", injected, "-o", again).CombinedOutput(); err != nil {
		t.Errorf("perf inject of the injected file: %v\n%s", err, out)
	} else if rep2, err := exec.Command("perf", "report", "--stdio", "--sort", "sym", "-g", "none", "-i", again).CombinedOutput(); err != nil || !strings.Contains(string(rep2), top[0]) {
		t.Errorf("perf report after perf inject does not list %s: %v", top[0], err)
	}
}

// TestInjectKeepsYJITEntries: inject appends beside what Ruby's own perf
// map support wrote, never truncating it.
func TestInjectKeepsYJITEntries(t *testing.T) {
	file, pid := workloadRecording(t, time.Second)
	dir := t.TempDir()
	mapFile := filepath.Join(dir, fmt.Sprintf("perf-%d.map", pid))
	yjit := fmt.Sprintf("%x 40 [JIT] Integer#times\n", 0x7f8a3c00a000+rand.Intn(1<<16)*16)
	if err := os.WriteFile(mapFile, []byte(yjit), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"inject", "-i", file, "-o", filepath.Join(dir, "x.data"), "--map-dir", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("inject: exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(mapFile)
	top := topRubyNames(t, file, 1)[0]
	if err != nil || !strings.HasPrefix(string(b), yjit) || !strings.Contains(string(b), " "+top+"\n") {
		t.Errorf("map file after inject:\n%.300s", b)
	}
}

// BenchmarkScript compares rubyperf script (unwinding in Go, merging Ruby
// frames) with stock perf script (DWARF unwinding) on the same recording.
func BenchmarkScript(b *testing.B) {
	file, _ := workloadRecording(b, 3*time.Second)
	b.Run("rubyperf", func(b *testing.B) {
		for b.Loop() {
			var stdout, stderr bytes.Buffer
			if code := run([]string{"script", "-i", file}, &stdout, &stderr); code != 0 {
				b.Fatal(stderr.String())
			}
		}
	})
	b.Run("perf", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("perf", "script", "-i", file).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// topRubyNames are the n Ruby frame names on the most samples.
func topRubyNames(t *testing.T, file string, n int) []string {
	t.Helper()
	count := map[string]int{}
	_, err := readback.ReadStacks(file, readback.ReadOptions{}, func(s merge.Stack) error {
		seen := map[string]bool{}
		for _, f := range s.Frames {
			if (f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc) && !seen[f.Name] {
				seen[f.Name] = true
				count[f.Name]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(count))
	for k := range count {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if count[names[i]] != count[names[j]] {
			return count[names[i]] > count[names[j]]
		}
		return names[i] < names[j]
	})
	if len(names) < n {
		t.Fatalf("only %d Ruby names in the recording", len(names))
	}
	return names[:n]
}
