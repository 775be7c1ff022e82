package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/internal/rubyoracle"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// rdocCounts is what testdata/ruby/alloc_rdoc.rb counted through
// RubyperfOracle.count_allocations (the allocator's own event, counted as
// stackprof's :object mode at interval 1 counts): every object, and each
// method's [self, total].
type rdocCounts struct {
	Objects uint64
	Methods map[string][2]uint64
	// Classes: objects by class, as Ruby's allocation event saw them.
	Classes map[string]uint64
}

// rdocRounds is how many times alloc_rdoc.rb documents RDoc's sources (twice
// that on a Ruby of small heap pages): one round allocates about 4.4
// million objects in 5-8 s with Ruby's own count on.
const rdocRounds = "2"

// TestRecordAllocRealApp: record --alloc -- ruby of a real application
// (RDoc documenting its own sources, 56 to 65 Ruby frames deep), on every
// test Ruby, interpreted and with YJIT, gives its top 20 allocating
// methods, by self and by total, their share within 3 points of what Ruby's
// own allocation event counted in the same process (RubyperfOracle's
// count_allocations, testdata/ruby/oracle_ext), its top 10 classes theirs
// within 3 points, and thousands of samples. The shares are estimates, and
// their spread is that of the windows the sampler watches, a few hundred in
// a run. Measured 2026-11-29, the worst total of each run: two rounds
// everywhere, 3.3 and 3.4 0.6-2.4 points (11 runs), 3.1 2.5-9.3 (7 of 9
// past 3: its pages hold a quarter of 3.3's objects, so the sampler, which
// watches so many refills a second, sees a quarter of the windows an
// object); with twice the rounds on 3.1 (alloc_rdoc.rb), 0.6-2.9 (12 runs),
// and the 3.3/3.4 runs beside them 0.5-1.2 but one, 5.8 (Ripper::Lexer#lex
// under), then 2.7 when measured again. A run
// outside the bounds is made once more, and the test fails when the second
// is outside them too.
func TestRecordAllocRealApp(t *testing.T) {
	var runs []testruby.JITRun
	for _, r := range testruby.All(t) {
		runs = append(runs, testruby.JITRun{Ruby: r})
	}
	for _, r := range append(runs, testruby.WithJIT(t, "yjit")...) {
		t.Run(r.Name(), func(t *testing.T) {
			problems := allocRealApp(t, r)
			if len(problems) > 0 {
				t.Logf("outside the bounds: %s; once more", strings.Join(problems, "; "))
				problems = allocRealApp(t, r)
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

// allocRealApp runs TestRecordAllocRealApp's measurement once on r and
// returns what is outside its bounds.
func allocRealApp(t *testing.T, r testruby.JITRun) (problems []string) {
	t.Helper()
	script, _ := filepath.Abs("../../testdata/ruby/alloc_rdoc.rb")
	dir := t.TempDir()
	counts, data := filepath.Join(dir, "counts.json"), filepath.Join(dir, "alloc.data")
	oracle := rubyoracle.Args(t, r.Exe)
	if oracle == nil {
		t.Fatalf("the allocation-counting extension cannot be built for %s: it needs the Ruby's headers (scripts/test-rubies.sh unpacks Debian's rubyX.Y-dev)", r.Name())
	}
	args := append([]string{"--alloc", "-o", data, "--", r.Exe}, oracle...)
	args = append(append(args, r.Args...), script, counts, filepath.Join(dir, "doc"), "1", rdocRounds)
	_, stderr := recordOutput(t, args...)
	t.Logf("%s", strings.TrimSpace(stderr))
	b, err := os.ReadFile(counts)
	if err != nil {
		t.Fatal(err)
	}
	var want rdocCounts
	if err := json.Unmarshal(b, &want); err != nil || want.Objects == 0 {
		t.Fatalf("%s: %v (%d objects)", counts, err, want.Objects)
	}
	p := allocProfile(t, data)
	if len(p.Sample) < 1000 {
		problems = append(problems, fmt.Sprintf("%d stacks sampled, want thousands of samples", len(p.Sample)))
	}
	t.Logf("deepest stack: %d Ruby frames", deepest(p))
	for i, kind := range []string{"self", "total"} {
		got := selfShares(p, 0)
		if kind == "total" {
			got = totalShares(p, 0)
		}
		var lines []string
		worst := 0.0
		for _, m := range topMethods(want, i, 20) {
			w := 100 * float64(want.Methods[m][i]) / float64(want.Objects)
			d := got[m] - w
			worst = math.Max(worst, math.Abs(d))
			lines = append(lines, fmt.Sprintf("%-55s %6.2f%% %6.2f%%", m, got[m], w))
			if math.Abs(d) > 3 {
				problems = append(problems, fmt.Sprintf("%s: %s %.2f%% of the objects allocated, Ruby counted %.2f%%", m, kind, got[m], w))
			}
		}
		t.Logf("top 20 by %s (rubyperf, Ruby), at most %.2f points apart:\n%s", kind, worst, strings.Join(lines, "\n"))
	}
	all := labelShares(p, merge.ClassLabel, 0)
	t.Logf("%.2f%% of the objects freed before their class was read, %.2f%% unknown, %.2f%% without",
		all[recording.FreedClassLabel], all["[unknown]"], all[""])
	return append(problems, checkClasses(t, want.Classes, knownClasses(all), 10, 3)...)
}

// checkClasses returns what is past limit points between the shares (%)
// of the top classes Ruby counted (want, objects by class) and got's.
func checkClasses(t *testing.T, want map[string]uint64, got map[string]float64, top int, limit float64) (problems []string) {
	t.Helper()
	all := uint64(0)
	for _, n := range want {
		all += n
	}
	if all == 0 {
		t.Fatal("Ruby counted no object by class")
	}
	names := slices.SortedFunc(maps.Keys(want), func(a, b string) int {
		return cmp.Or(cmp.Compare(want[b], want[a]), strings.Compare(a, b))
	})
	var lines []string
	worst := 0.0
	for _, c := range names[:min(top, len(names))] {
		w := 100 * float64(want[c]) / float64(all)
		d := got[c] - w
		worst = math.Max(worst, math.Abs(d))
		lines = append(lines, fmt.Sprintf("%-40s %6.2f%% %6.2f%%", c, got[c], w))
		if math.Abs(d) > limit {
			problems = append(problems, fmt.Sprintf("class %s: %.2f%% of the objects allocated, Ruby counted %.2f%%", c, got[c], w))
		}
	}
	t.Logf("top %d classes (rubyperf, Ruby), at most %.2f points apart:\n%s", top, worst, strings.Join(lines, "\n"))
	return problems
}

// topMethods are the n methods Ruby counted most objects for (i: 0 self,
// 1 total), but blocks and <main>-like frames, which the two name alike
// only by chance.
func topMethods(c rdocCounts, i, n int) []string {
	var names []string
	for m := range c.Methods {
		if !strings.HasPrefix(m, "<") && !strings.Contains(m, "block") {
			names = append(names, m)
		}
	}
	sort.Slice(names, func(a, b int) bool {
		x, y := c.Methods[names[a]][i], c.Methods[names[b]][i]
		return x > y || x == y && names[a] < names[b]
	})
	return names[:min(n, len(names))]
}

// selfShares is each function's share (%) of value i over the samples
// whose leaf it is.
func selfShares(p *profile.Profile, i int) map[string]float64 {
	all := 0.0
	by := map[string]float64{}
	for _, s := range p.Sample {
		v := float64(s.Value[i])
		all += v
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 {
			by[s.Location[0].Line[0].Function.Name] += v
		}
	}
	for n := range by {
		by[n] = 100 * by[n] / all
	}
	return by
}

// deepest is the most frames a sample's stack has.
func deepest(p *profile.Profile) int {
	n := 0
	for _, s := range p.Sample {
		d := 0
		for _, l := range s.Location {
			d += len(l.Line)
		}
		n = max(n, d)
	}
	return n
}
