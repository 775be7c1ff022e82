package export

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// TestFrameName checks the names every format shares.
func TestFrameName(t *testing.T) {
	for _, tc := range []struct {
		f    merge.Frame
		want string
	}{
		{merge.Frame{Kind: merge.KindRuby, Name: "Foo#bar"}, "Foo#bar"},
		{merge.Frame{Kind: merge.KindRuby, Name: ""}, "[unknown]"},
		{merge.Frame{Kind: merge.KindRuby, Name: "[unknown]", File: "/app/a.rb"}, "[unknown]"},
		{merge.Frame{Kind: merge.KindNative, Name: "[unknown]", File: "/usr/lib/libc.so.6"}, "[libc.so.6]"},
		{merge.Frame{Kind: merge.KindNative, Name: "[unknown]"}, "[unknown]"},
		{merge.Frame{Kind: merge.KindKernel, Name: "[unknown]", File: "[kernel.kallsyms]"}, "[kernel.kallsyms]"},
		{merge.Frame{Kind: merge.KindRuby, Name: "a\nb\r\x00c\xff"}, `a\nb\r\x00c\xff`},
	} {
		if got := FrameName(&tc.f); got != tc.want {
			t.Errorf("FrameName(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}

// TestNoPeriod checks that stacks without a Period (and Time) still
// weigh something: samples are counted.
func TestNoPeriod(t *testing.T) {
	stacks := testStacks()
	for i := range stacks {
		stacks[i].Period, stacks[i].Time = 0, 0
	}
	var buf bytes.Buffer
	if err := WriteFolded(&buf, stacks, FoldedOptions{Root: RootNone}); err != nil {
		t.Fatal(err)
	}
	checkFlamegraphPl(t, buf.String())
	if !bytes.Contains(buf.Bytes(), []byte(";block in Foo#bar 3\n")) {
		t.Errorf("folded output does not count samples:\n%s", buf.String())
	}

	buf.Reset()
	if err := WriteSpeedscope(&buf, stacks, SpeedscopeOptions{}); err != nil {
		t.Fatal(err)
	}
	checkSpeedscope(t, buf.Bytes())
	var f speedscopeFile
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	if p := f.Profiles[0]; p.Unit != "none" || p.Weights[0] != 1 || p.EndValue != uint64(len(p.Weights)) {
		t.Errorf("first profile: unit %q, weights %v, endValue %d", p.Unit, p.Weights, p.EndValue)
	}

	buf.Reset()
	if err := WriteFlameGraphSVG(&buf, stacks, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	checkFrames(t, parseSVG(t, buf.Bytes()), SVGOptions{})
}
