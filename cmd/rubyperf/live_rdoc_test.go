package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// liveCounts is what testdata/ruby/live_rdoc.rb counted of the objects it
// still held, allocated while it was recorded: by allocating method.
type liveCounts struct {
	Objects uint64
	Methods map[string]uint64
}

// TestRecordLiveRealApp: record --alloc --live -p of a real application
// whose heap grows (RDoc documenting parts of Ruby's library over and over,
// keeping each run, on Debian's Ruby 3.1) has as its top 3 methods by
// objects in use the 3 Ruby counts as having allocated most of what it
// still holds (its own allocation tracing, in the same process), each of
// Ruby's top 5 within 10 points of Ruby's share (the allocation weights'
// spread: a few hundred samples are alive at the end, each standing for
// hundreds to thousands of objects); and the objects in use add up to 0.4
// of Ruby's count or more (what is not proven alive counts for nothing),
// and not over it by a third. Ruby's count and ours are two measurements
// of a heap that moves: a run outside these bounds (one CI run in four so
// far, under its other packages' load: Struct#new 11.7 points under
// Ruby's share, Ripper#parse 7.4 over) is made once more, and the test
// fails when the second is outside them too.
func TestRecordLiveRealApp(t *testing.T) {
	ruby := testskip.Command(t, "ruby", "ruby")
	problems := liveRealApp(t, ruby)
	if len(problems) > 0 {
		t.Logf("outside the bounds: %s; once more", strings.Join(problems, "; "))
		problems = liveRealApp(t, ruby)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// liveRealApp runs TestRecordLiveRealApp's measurement once and returns
// what is outside its bounds.
func liveRealApp(t *testing.T, ruby string) (problems []string) {
	t.Helper()
	script, _ := filepath.Abs("../../testdata/ruby/live_rdoc.rb")
	dir := t.TempDir()
	counts, data := filepath.Join(dir, "counts.json"), filepath.Join(dir, "live.data")
	cmd := exec.Command(ruby, script, counts, filepath.Join(dir, "doc"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
		}
		exited <- cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("live_rdoc.rb did not say ready")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("live_rdoc.rb not ready in 30 s")
	}
	time.Sleep(3 * time.Second) // a heap of finished runs
	pid := cmd.Process.Pid
	cmd.Process.Signal(syscall.SIGUSR1)
	_, stderr := recordOutput(t, "--alloc", "--live", "-p", strconv.Itoa(pid), "-d", "10", "-o", data)
	cmd.Process.Signal(syscall.SIGUSR2)
	ended := time.Now()
	t.Logf("%s", strings.TrimSpace(stderr))
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("live_rdoc.rb: %v", err)
		}
		t.Logf("live_rdoc.rb counted in %.1fs", time.Since(ended).Seconds())
	case <-time.After(2 * time.Minute):
		t.Fatal("live_rdoc.rb did not count in 2 minutes")
	}
	b, err := os.ReadFile(counts)
	if err != nil {
		t.Fatal(err)
	}
	var want liveCounts
	if err := json.Unmarshal(b, &want); err != nil || want.Objects == 0 {
		t.Fatalf("%s: %v (%d objects)", counts, err, want.Objects)
	}
	p := liveProfile(t, data)
	var inuse float64
	for _, s := range p.Sample {
		inuse += float64(s.Value[2])
	}
	// A singleton class's method Ruby names without its class ("#new", a
	// Struct's): ours, named after the class, go under the same name.
	got := map[string]float64{}
	for name, share := range selfShares(p, 2) {
		if i := strings.LastIndexByte(name, '.'); i > 0 && !strings.ContainsAny(name[i:], "# ") {
			name = "#" + name[i+1:]
		}
		got[name] += share
	}
	names := slices.SortedFunc(maps.Keys(want.Methods), func(a, b string) int {
		return cmp.Or(cmp.Compare(want.Methods[b], want.Methods[a]), strings.Compare(a, b))
	})
	var lines []string
	worst := 0.0
	for i, m := range names[:min(10, len(names))] {
		w := 100 * float64(want.Methods[m]) / float64(want.Objects)
		d := got[m] - w
		lines = append(lines, fmt.Sprintf("%-55s %6.2f%% %6.2f%%", m, got[m], w))
		if i < 5 {
			worst = math.Max(worst, math.Abs(d))
			if math.Abs(d) > 10 {
				problems = append(problems, fmt.Sprintf("%s: %.2f%% of the objects in use, Ruby counted %.2f%%", m, got[m], w))
			}
		}
	}
	t.Logf("top 10 by objects in use (rubyperf, Ruby), the top 5 at most %.2f points apart:\n%s", worst, strings.Join(lines, "\n"))
	ours := slices.SortedFunc(maps.Keys(got), func(a, b string) int { return cmp.Or(cmp.Compare(got[b], got[a]), strings.Compare(a, b)) })
	if len(names) < 3 || len(ours) < 3 || !sameSet(names[:3], ours[:3]) {
		problems = append(problems, fmt.Sprintf("top 3 by objects in use: %q; Ruby's: %q", ours[:min(3, len(ours))], names[:min(3, len(names))]))
	}
	ratio := inuse / float64(want.Objects)
	t.Logf("%.0f objects in use, Ruby holds %d allocated while recorded (ratio %.2f)", inuse, want.Objects, ratio)
	if ratio < 0.4 || ratio > 4.0/3 {
		problems = append(problems, fmt.Sprintf("%.0f objects in use, Ruby holds %d (ratio %.2f, want 0.4 to 1.33)", inuse, want.Objects, ratio))
	}
	return problems
}

// sameSet says whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}
