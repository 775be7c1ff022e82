package rubystack

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/rubyoracle"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// oracleAnswer is one thread's answer from testdata/ruby/oracle.rb.
type oracleAnswer struct {
	TID    int `json:"tid"`
	Frames []struct {
		Label string  `json:"label"`
		Path  *string `json:"path"`
		Line  int64   `json:"line"`
	} `json:"frames"`
}

var scenarios = []struct {
	name    string
	threads int
	// replayed: the local flavors' replay fixtures have it. bindings.rb
	// came after the last session with a copy of Ruby's repository, which
	// is needed to build them (TestRecordReplayFixtures -update).
	replayed bool
}{
	{"methods", 1, true}, {"dynamic", 1, true}, {"deep", 1, true}, {"threads", 4, true}, {"fiber", 1, true},
	{"bindings", 1, false},
}

// startScenario runs testdata/ruby/NAME.rb until it parks, returning the
// process and Ruby's own answer for each thread, by tid. flags go to the
// interpreter first.
func startScenario(t *testing.T, r testruby.Ruby, name string, flags ...string) (*exec.Cmd, map[int]oracleAnswer) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "testdata", "ruby", name+".rb"))
	if err != nil {
		t.Fatal(err)
	}
	args := append(append(flags, rubyoracle.Args(t, r.Exe)...), script)
	cmd, lines := testruby.StartOutput(t, r, args...)
	answers := map[int]oracleAnswer{}
	for _, l := range lines {
		var a oracleAnswer
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("oracle line %q: %v", l, err)
		}
		answers[a.TID] = a
	}
	return cmd, answers
}

// localFlavors are the test Rubies scripts/mirror-rubies.sh builds by hand
// from a copy of Ruby's repository: versions without a Debian package. CI
// cannot build them (their committed replay fixtures stand in there), so
// they are tested when present and skipped when absent, even under CI=true.
var localFlavors = []string{"mirror-3.2-shared", "mirror-4.0-shared"}

// localRubies returns the local flavors that are built.
func localRubies(t *testing.T) []testruby.Ruby {
	var out []testruby.Ruby
	for _, name := range localFlavors {
		if r, ok := testruby.Optional(name); ok {
			out = append(out, r)
		} else {
			t.Logf("%s not built (scripts/mirror-rubies.sh builds it from a copy of Ruby's repository)", name)
		}
	}
	return out
}

// TestSnapshotMatchesRuby: for every scenario on every test Ruby, the
// snapshot of each thread equals Ruby's own answer frame by frame (the musl
// Rubies included: testruby.WithMusl).
func TestSnapshotMatchesRuby(t *testing.T) {
	t.Run("matrix", func(t *testing.T) {
		for _, r := range testruby.WithMusl(t) {
			if !slices.Contains(localFlavors, r.Name) { // those run below, present or not
				snapshotMatchesRuby(t, r, r.Name, nil)
			}
		}
	})
	for _, r := range localRubies(t) {
		snapshotMatchesRuby(t, r, r.Name, nil)
	}
}

// TestSnapshotMatchesRubyUnderJIT: the same, with YJIT or ZJIT compiling
// every method on its first call, on every test Ruby built with one: JIT
// code pushes the frames, and writes a frame's pc before it calls a C method
// such as Kernel#sleep, so a parked thread's stack is exact for Ruby too.
func TestSnapshotMatchesRubyUnderJIT(t *testing.T) {
	for _, r := range testruby.WithJIT(t) {
		t.Setenv(r.Env())
		snapshotMatchesRuby(t, r.Ruby, r.Name(), r.Args)
	}
}

func snapshotMatchesRuby(t *testing.T, r testruby.Ruby, name string, flags []string) {
	for _, sc := range scenarios {
		t.Run(name+"/"+sc.name, func(t *testing.T) {
			cmd, answers := startScenario(t, r, sc.name, flags...)
			if len(answers) != sc.threads {
				t.Fatalf("oracle answered for %d threads, want %d", len(answers), sc.threads)
			}
			stacks := parkedSnapshot(t, cmd.Process.Pid)
			if len(stacks) != sc.threads {
				t.Errorf("snapshot has %d threads, want %d", len(stacks), sc.threads)
			}
			for _, s := range stacks {
				want, ok := answers[s.TID]
				if !ok {
					t.Errorf("thread %d %q: no oracle answer", s.TID, s.Name)
					continue
				}
				compareFrames(t, fmt.Sprintf("thread %d %q", s.TID, s.Name), s.Frames, want)
			}
			t.Logf("%d threads, %d frames equal to Ruby's", len(stacks), countFrames(stacks))
		})
	}
}

func countFrames(stacks []ThreadStack) int {
	n := 0
	for _, s := range stacks {
		n += len(s.Frames)
	}
	return n
}

// parkedSnapshot waits until every thread sits in Kernel#sleep: a script
// prints "ready" just before it calls sleep.
func parkedSnapshot(t *testing.T, pid int) []ThreadStack {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stacks := snapshot(t, pid)
		parked := true
		for _, s := range stacks {
			if len(s.Frames) == 0 || s.Frames[0].Label != "Kernel#sleep" {
				parked = false
			}
		}
		if parked || time.Now().After(deadline) {
			return stacks
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveReader opens a Reader on a live process for the rest of the test.
func liveReader(tb testing.TB, pid int) *Reader {
	tb.Helper()
	p, err := OpenProcess(pid, rubybuild.OpenOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	mem := &ProcessMemory{PID: pid}
	tb.Cleanup(func() { mem.Close(); p.Close() })
	r, err := NewReader(p, mem)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func snapshot(t *testing.T, pid int) []ThreadStack {
	t.Helper()
	r := liveReader(t, pid)
	stacks, err := r.Snapshot()
	testskip.Privileged(t, err)
	if r.Stats.UnknownFrames != 0 {
		t.Errorf("%d unknown frames in a parked process", r.Stats.UnknownFrames)
	}
	return stacks
}

func compareFrames(t *testing.T, who string, got []Frame, want oracleAnswer) {
	t.Helper()
	n := max(len(got), len(want.Frames))
	bad := 0
	for i := 0; i < n && bad < 10; i++ {
		var g, w string
		if i < len(got) {
			p := "null"
			if got[i].HasPath {
				p = got[i].Path
			}
			g = fmt.Sprintf("%s %s:%d", got[i].Label, p, got[i].Line)
		}
		if i < len(want.Frames) {
			p := "null"
			if want.Frames[i].Path != nil {
				p = *want.Frames[i].Path
			}
			w = fmt.Sprintf("%s %s:%d", want.Frames[i].Label, p, want.Frames[i].Line)
		}
		if g != w {
			t.Errorf("%s frame %d: got %q, Ruby says %q", who, i, g, w)
			bad++
		}
	}
}
