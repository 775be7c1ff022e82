package rubyoracle

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
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
