package export

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// TestFoldedGolden pins the folded output of the test profile, by CPU time
// under thread names (the default), and by samples under comm-PID/TID
// with stackcollapse-perf.pl --all's annotations.
func TestFoldedGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts FoldedOptions
	}{
		{"folded.txt", FoldedOptions{}},
		{"folded-samples-tid.txt", FoldedOptions{Weight: WeightSamples, Root: RootTID, Annotate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFolded(&buf, testStacks(), tc.opts); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
			checkFlamegraphPl(t, buf.String())
		})
	}
}

// flamegraph.pl's line rules (FlameGraph @41fee1f): the count is the last
// number after whitespace; if what is left also ends in one, the line is
// taken for a differential one.
var flameLine = regexp.MustCompile(`^(.*)\s+?(\d+(?:\.\d*)?)$`)

// checkFlamegraphPl reads folded text as flamegraph.pl would and checks
// that every line parses as one stack and one count, that frames are
// never empty, and that lines are sorted and distinct.
func checkFlamegraphPl(t *testing.T, text string) {
	t.Helper()
	if !strings.HasSuffix(text, "\n") {
		t.Errorf("output does not end in a newline")
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if !slices.IsSorted(lines) {
		t.Errorf("lines are not sorted")
	}
	seen := make(map[string]bool)
	for _, l := range lines {
		m := flameLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("flamegraph.pl would not parse %q", l)
			continue
		}
		if flameLine.MatchString(m[1]) {
			t.Errorf("flamegraph.pl would read %q as a differential line", l)
		}
		if seen[m[1]] {
			t.Errorf("stack %q appears twice", m[1])
		}
		seen[m[1]] = true
		for _, f := range strings.Split(m[1], ";") {
			if f == "" {
				t.Errorf("empty frame in %q", l)
			}
		}
	}
}

// TestFoldedWeights checks that the weights add up: to the sum of the
// periods by default, to the number of samples with WeightSamples, and
// that RootNone merges threads.
func TestFoldedWeights(t *testing.T) {
	stacks := testStacks()
	var period uint64
	for _, s := range stacks {
		period += s.Period
	}
	for _, tc := range []struct {
		opts FoldedOptions
		want uint64
	}{
		{FoldedOptions{}, period},
		{FoldedOptions{Weight: WeightSamples}, uint64(len(stacks))},
		{FoldedOptions{Root: RootNone, Weight: WeightSamples}, uint64(len(stacks))},
		{FoldedOptions{Root: RootPID}, period},
	} {
		var buf bytes.Buffer
		if err := WriteFolded(&buf, stacks, tc.opts); err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			i := strings.LastIndexByte(l, ' ')
			n, err := strconv.ParseUint(l[i+1:], 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			sum += n
			switch tc.opts.Root {
			case RootNone:
				if !strings.HasPrefix(l, "_start;") && !strings.HasPrefix(l, "clone3;") {
					t.Errorf("RootNone: line %q does not start at the outermost frame", l)
				}
			case RootPID:
				if !strings.HasPrefix(l, "ruby-4242;") && !strings.HasPrefix(l, "worker_pool-4242;") && !strings.HasPrefix(l, "rake-5151;") {
					t.Errorf("RootPID: line %q has no comm-PID root", l)
				}
			}
		}
		if sum != tc.want {
			t.Errorf("%+v: weights add up to %d, want %d", tc.opts, sum, tc.want)
		}
	}
}

// TestFoldedEscaping feeds names that would break a folded line.
func TestFoldedEscaping(t *testing.T) {
	stacks := []merge.Stack{{Comm: "my\tthread 2", Period: 5, Frames: []merge.Frame{
		{Kind: merge.KindRuby, Name: "leaf 3.5"},
		{Kind: merge.KindRuby, Name: "a;b\nc\x00d"},
		{Kind: merge.KindNative, Name: "[unknown]", File: "/lib/libz.so.1"},
		{Kind: merge.KindNative, Name: ""},
		{Kind: merge.KindRuby, Name: "bad\xffutf8"},
	}}}
	var buf bytes.Buffer
	if err := WriteFolded(&buf, stacks, FoldedOptions{}); err != nil {
		t.Fatal(err)
	}
	want := `my\tthread_2;bad\xffutf8;[unknown];[libz.so.1];a:b\nc\x00d;leaf_3.5 5` + "\n"
	if buf.String() != want {
		t.Errorf("got  %q\nwant %q", buf.String(), want)
	}
	checkFlamegraphPl(t, buf.String())
}

// TestFoldedDeterministic writes the same stacks in another order.
func TestFoldedDeterministic(t *testing.T) {
	stacks := testStacks()
	var a, b bytes.Buffer
	if err := WriteFolded(&a, stacks, FoldedOptions{}); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(stacks)
	if err := WriteFolded(&b, stacks, FoldedOptions{}); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("output depends on the order of the stacks")
	}
}
