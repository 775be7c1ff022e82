package rubyoracle

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestFiddleOracleSurvivesGC: the Fiddle fallback of oracle.rb, asked for
// frames while every allocation runs the GC, returns labels that are still
// valid strings afterwards. Holding a label only as Fiddle's integer let the
// GC free it, and Ruby crashed later in JSON.generate.
func TestFiddleOracleSurvivesGC(t *testing.T) {
	oracle, err := testruby.RepoPath("testdata/ruby/oracle.rb")
	if err != nil {
		t.Fatal(err)
	}
	script := `require ARGV[0]
def outer = inner
def inner
  GC.stress = true
  frames = Oracle.raw_frames
  GC.stress = false
  GC.start
  JSON.generate(frames)
end
20.times { outer }
labels = outer
abort "no inner frame in #{labels}" unless labels.include?('Object#inner')
puts 'fine'`
	for _, r := range testruby.All(t) {
		// A 4.0 built by hand from Ruby's repository (Local) lacks Fiddle,
		// a bundled gem from 4.0 that an offline build does not install:
		// the oracle takes its C extension there (Args), and this test of
		// the Fiddle fallback has nothing to run.
		if r.Local && exec.Command(r.Exe, "-e", "require 'fiddle'").Run() != nil {
			t.Logf("%s: no Fiddle (a bundled gem from 4.0): the oracle uses its C extension", r.Name)
			continue
		}
		// The musl Ruby is built without libffi (musl-gcc sees none of
		// the glibc-side libraries), so without Fiddle: the same.
		if r.Libc == "musl" {
			t.Logf("%s: no Fiddle (built without libffi against musl): the oracle uses its C extension", r.Name)
			continue
		}
		t.Run(r.Name, func(t *testing.T) {
			// Every other test Ruby of scripts/test-rubies.sh has Fiddle
			// (built with libffi).
			if out, err := exec.Command(r.Exe, "-e", "require 'fiddle'").CombinedOutput(); err != nil {
				t.Fatalf("no Fiddle in this build: %v\n%s", err, out)
			}
			out, err := exec.Command(r.Exe, "-e", script, oracle).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "fine" {
				t.Fatalf("%v\n%.2000s", err, out)
			}
		})
	}
}

// TestCountAllocationsAgreesWithStackprof: RubyperfOracle.count_allocations,
// Ruby's own count of allocations by method on every test Ruby, counts a
// deep recursive workload exactly as stackprof's :object mode at interval 1
// does (the reference the allocation tests used where it is installed:
// the system's Ruby), method by method, self and total, recursion counted
// once; and counts the classes.
func TestCountAllocationsAgreesWithStackprof(t *testing.T) {
	ruby := testskip.Command(t, "ruby", "ruby")
	if out, err := exec.Command(ruby, "-e", `require "stackprof"`).CombinedOutput(); err != nil {
		testskip.IfNotSupported(t, testskip.Missing("stackprof for the system's Ruby", "Debian ruby-stackprof; scripts/deps.sh installs it",
			fmt.Errorf("%v: %s", err, out)))
	}
	args := Args(t, ruby)
	if args == nil {
		t.Fatalf("the extension cannot be built for %s: it needs Debian's ruby3.1-dev (scripts/deps.sh installs it)", ruby)
	}
	script := `require 'stackprof'; require 'rubyperf_oracle'; require 'json'
def leaf(i) = [i]
def mid(n, i) = n.zero? ? [leaf(i), leaf(i + 1)] : mid(n - 1, i)
class Foo; def run = 100.times.map { |i| mid(30, i) }; end
sp = nil
ours = RubyperfOracle.count_allocations { sp = StackProf.run(mode: :object, interval: 1, raw: false) { 20.times { Foo.new.run } } }
theirs = sp[:frames].values.to_h { |f| [f[:name], [f[:samples], f[:total_samples]]] }
puts JSON.dump(ours: ours, theirs: theirs)`
	out, err := exec.Command(ruby, append(args, "-e", script)...).Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var got struct {
		Ours struct {
			Objects uint64
			Methods map[string][2]uint64
			Classes map[string]uint64
		}
		Theirs map[string][2]uint64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 20 rounds of 100 calls, each 3 Arrays at the bottom of 31 frames of
	// mid (one by each leaf, one by mid).
	for _, m := range []string{"Object#leaf", "Object#mid", "Foo#run"} {
		ours, theirs := got.Ours.Methods[m], got.Theirs[m]
		if ours != theirs || ours[1] == 0 {
			t.Errorf("%s: count_allocations counted [self total] %v, stackprof %v", m, ours, theirs)
		}
	}
	// A method's first calls may allocate its caches (a few objects).
	mid, leaf := got.Ours.Methods["Object#mid"], got.Ours.Methods["Object#leaf"]
	if leaf != [2]uint64{20 * 100 * 2, 20 * 100 * 2} || mid[0] < 20*100 || mid[0] > 20*100+16 || mid[1] != mid[0]+leaf[1] {
		t.Errorf("Object#mid [self total] %v, Object#leaf %v: want about [%d %d] and exactly [%d %d] (each allocation once, however deep the recursion)",
			mid, leaf, 20*100, 20*100*3, 20*100*2, 20*100*2)
	}
	if got.Ours.Classes["Array"] < 20*100*3 {
		t.Errorf("classes %v: want at least %d Arrays", got.Ours.Classes, 20*100*3)
	}
	t.Logf("count_allocations: %d objects; Object#mid %v, Object#leaf %v", got.Ours.Objects, got.Ours.Methods["Object#mid"], got.Ours.Methods["Object#leaf"])
}
