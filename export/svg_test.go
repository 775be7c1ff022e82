package export

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// TestSVGGolden pins the flame graph of the test profile, and its icicle
// form by sample count, and checks both are well-formed and consistent.
func TestSVGGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts SVGOptions
	}{
		{"flamegraph.svg", SVGOptions{Subtitle: "bench.rb & rake <test>"}},
		{"icicle.svg", SVGOptions{Icicle: true, Weight: WeightSamples, Root: RootTID, Width: 900}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFlameGraphSVG(&buf, testStacks(), tc.opts); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
			frames := parseSVG(t, buf.Bytes())
			checkFrames(t, frames, tc.opts)
		})
	}
}

// svgBox is a frame box as the SVG draws it.
type svgBox struct {
	title      string
	x, y, w, h float64
	fill, text string
}

func (b svgBox) name() string { return strings.SplitN(b.title, "\n", 2)[0] }

// parseSVG reads the SVG with encoding/xml, which fails on anything not
// well-formed, and returns the boxes under <g id="frames">.
func parseSVG(t *testing.T, data []byte) []svgBox {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var boxes []svgBox
	var stack []string // element names
	inFrames := false
	var cur *svgBox
	var chars strings.Builder
	sawScript, sawRoot := false, false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tok.Name.Local)
			chars.Reset()
			attr := func(name string) string {
				for _, a := range tok.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			num := func(name string) float64 {
				v, err := strconv.ParseFloat(attr(name), 64)
				if err != nil {
					t.Fatalf("<%s %s=%q>: %v", tok.Name.Local, name, attr(name), err)
				}
				return v
			}
			switch {
			case len(stack) == 1:
				sawRoot = tok.Name.Local == "svg" && tok.Name.Space == "http://www.w3.org/2000/svg"
			case tok.Name.Local == "g" && attr("id") == "frames":
				inFrames = true
			case inFrames && tok.Name.Local == "g":
				boxes = append(boxes, svgBox{})
				cur = &boxes[len(boxes)-1]
			case cur != nil && tok.Name.Local == "rect":
				cur.x, cur.y, cur.w, cur.h, cur.fill = num("x"), num("y"), num("width"), num("height"), attr("fill")
			case tok.Name.Local == "script":
				sawScript = true
			}
		case xml.CharData:
			chars.Write(tok)
		case xml.EndElement:
			switch {
			case cur != nil && tok.Name.Local == "title":
				cur.title = chars.String()
			case cur != nil && tok.Name.Local == "text":
				cur.text = chars.String()
			case cur != nil && tok.Name.Local == "g":
				cur = nil
			case inFrames && tok.Name.Local == "g":
				inFrames = false
			}
			stack = stack[:len(stack)-1]
		}
	}
	if !sawRoot {
		t.Errorf("root element is not an SVG <svg>")
	}
	if !sawScript {
		t.Errorf("no <script>")
	}
	return boxes
}

// checkFrames checks the geometry of a flame graph: the root spans the
// width; every other box sits one level from a parent box whose span
// holds it; siblings do not overlap and never add up to more than their
// parent; labels are prefixes of the names; tooltips carry the numbers.
func checkFrames(t *testing.T, boxes []svgBox, opts SVGOptions) {
	t.Helper()
	if len(boxes) == 0 {
		t.Fatal("no frames")
	}
	width := float64(cmp.Or(opts.Width, 1200))
	root := boxes[0]
	if root.name() != "all" || math.Abs(root.x-svgPad) > 0.001 || math.Abs(root.w-(width-2*svgPad)) > 0.001 {
		t.Errorf("root box %+v does not span the width", root)
	}
	const eps = 0.011 // coordinates are rounded to 0.01
	childrenWidth := make(map[int]float64)
	for i, b := range boxes {
		if b.w <= 0 || b.h != svgFrameH-1 {
			t.Errorf("box %q: width %v height %v", b.name(), b.w, b.h)
		}
		if !strings.HasPrefix(b.fill, "#") || len(b.fill) != 7 {
			t.Errorf("box %q: fill %q", b.name(), b.fill)
		}
		if b.text != "" && b.text != b.name() && !(strings.HasSuffix(b.text, "..") && strings.HasPrefix(b.name(), strings.TrimSuffix(b.text, ".."))) {
			t.Errorf("box %q: label %q", b.name(), b.text)
		}
		if lines := strings.Split(b.title, "\n"); !strings.Contains(lines[len(lines)-1], "sample") || !strings.HasSuffix(lines[len(lines)-1], "%") {
			t.Errorf("box %q: tooltip %q has no samples and share", b.name(), b.title)
		}
		if i == 0 {
			continue
		}
		parentY := b.y + svgFrameH
		if opts.Icicle {
			parentY = b.y - svgFrameH
		}
		parent := slices.IndexFunc(boxes, func(p svgBox) bool {
			return math.Abs(p.y-parentY) < 0.001 && p.x <= b.x+eps && b.x+b.w <= p.x+p.w+eps
		})
		if parent < 0 {
			t.Errorf("box %q at x=%v y=%v has no parent box holding it", b.name(), b.x, b.y)
			continue
		}
		childrenWidth[parent] += b.w
		for j, o := range boxes[:i] {
			if j != i && o.y == b.y && o.x < b.x+b.w-eps && b.x < o.x+o.w-eps {
				t.Errorf("boxes %q and %q overlap", o.name(), b.name())
			}
		}
	}
	for p, w := range childrenWidth {
		if w > boxes[p].w+eps {
			t.Errorf("children of %q are %v wide, more than its %v", boxes[p].name(), w, boxes[p].w)
		}
	}
}

// TestSVGContent checks what the test profile's boxes say: every frame
// name of the stacks is drawn (with names that need escaping intact),
// colors follow kinds, and tooltips carry counts and shares.
func TestSVGContent(t *testing.T) {
	stacks := testStacks()
	var buf bytes.Buffer
	if err := WriteFlameGraphSVG(&buf, stacks, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	boxes := parseSVG(t, buf.Bytes())
	byName := make(map[string]svgBox)
	for _, b := range boxes {
		byName[b.name()] = b
	}
	for _, s := range stacks {
		for i := range s.Frames {
			if _, ok := byName[FrameName(&s.Frames[i])]; !ok {
				t.Errorf("no box for %q", FrameName(&s.Frames[i]))
			}
		}
	}
	for name, want := range map[string]string{
		"Foo#bar":        "Foo#bar\nRuby · /app/lib/foo.rb\n9 samples, 90.91 ms, 60.00%",
		"Foo#<=>":        "Foo#<=>\nRuby · /app/lib/foo.rb\n1 sample, 10.10 ms, 6.67%",
		`Foo#"a;b&c" 42`: "Foo#\"a;b&c\" 42\nRuby · /app/lib/foo.rb\n1 sample, 10.10 ms, 6.67%",
		"all":            "all\n15 samples, 151.52 ms, 100.00%",
		"worker pool":    "worker pool\nthread\n3 samples, 30.30 ms, 20.00%",
		"pipe_write":     "pipe_write\nkernel · [kernel.kallsyms]\n1 sample, 10.10 ms, 6.67%",
		"rb_ary_each":    "rb_ary_each\nnative · /usr/lib/x86_64-linux-gnu/libruby-3.3.so.3.3.8\n5 samples, 50.51 ms, 33.33%",
	} {
		if got := byName[name].title; got != want {
			t.Errorf("tooltip of %q:\n%q\nwant\n%q", name, got, want)
		}
	}
	// Colors by kind: each in its palette's range.
	inRange := func(fill string, p palette) bool {
		var r, g, b int
		if _, err := fmt.Sscanf(fill, "#%02x%02x%02x", &r, &g, &b); err != nil {
			return false
		}
		in := func(v int, base, d float64) bool { return float64(v) >= base && float64(v) <= math.Min(255, base+d) }
		return in(r, p.r, p.dr) && in(g, p.g, p.dg) && in(b, p.b, p.db)
	}
	for name, p := range map[string]palette{
		"Foo#bar": paletteRuby, "Integer#times": paletteCFunc, "rb_ary_each": paletteNative,
		"do_syscall_64": paletteKernel, "ruby": paletteThread,
	} {
		if !inRange(byName[name].fill, p) {
			t.Errorf("%q is colored %s, outside its kind's palette %+v", name, byName[name].fill, p)
		}
	}
}

// TestSVGMinWidth checks that narrow frames are left out: with a minimum
// wider than one sample, single-sample stacks vanish, and the graph of a
// big profile stays bounded.
func TestSVGMinWidth(t *testing.T) {
	var buf bytes.Buffer
	// One sample is 1180/15 = 78.7 px wide: a minimum of 100 px keeps only
	// frames of two samples or more.
	if err := WriteFlameGraphSVG(&buf, testStacks(), SVGOptions{MinWidth: 100}); err != nil {
		t.Fatal(err)
	}
	for _, b := range parseSVG(t, buf.Bytes()) {
		if b.w < 100-0.01 {
			t.Errorf("box %q is %v wide, under the minimum", b.name(), b.w)
		}
		if b.name() == "Foo#<=>" || b.name() == "IO#write" {
			t.Errorf("single-sample frame %q drawn", b.name())
		}
	}

	buf.Reset()
	if err := WriteFlameGraphSVG(&buf, bigStacks(10000), SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	boxes := parseSVG(t, buf.Bytes())
	checkFrames(t, boxes, SVGOptions{})
	levels := make(map[float64]int)
	for _, b := range boxes {
		levels[b.y]++
	}
	for y, n := range levels {
		if n > int((1200-2*svgPad)/0.5) {
			t.Errorf("level at y=%v has %d boxes, more than fit at the minimum width", y, n)
		}
	}
	t.Logf("10,000 samples: %d boxes, %d bytes", len(boxes), buf.Len())
}

// TestSVGEmpty draws a profile with no samples.
func TestSVGEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFlameGraphSVG(&buf, nil, SVGOptions{}); err != nil {
		t.Fatal(err)
	}
	if boxes := parseSVG(t, buf.Bytes()); len(boxes) != 0 {
		t.Errorf("%d boxes", len(boxes))
	}
	if !strings.Contains(buf.String(), "No samples") {
		t.Errorf("no message")
	}
}

// TestSVGEscaping draws names with markup, quotes, and characters XML
// forbids, and checks that they come back from an XML parser as written.
func TestSVGEscaping(t *testing.T) {
	names := []string{`<script>alert("x")</script>`, "a]]>b & c", "x\uFFFEy", "tab\there", "'quoted'"}
	var frames []merge.Frame
	for _, n := range names {
		frames = append(frames, merge.Frame{Kind: merge.KindRuby, Name: n, File: "/a&b.rb"})
	}
	var buf bytes.Buffer
	if err := WriteFlameGraphSVG(&buf, []merge.Stack{{Comm: "t<1>", Period: 1, Frames: frames}}, SVGOptions{Title: "a < b"}); err != nil {
		t.Fatal(err)
	}
	got := make(map[string]bool)
	for _, b := range parseSVG(t, buf.Bytes()) {
		got[b.name()] = true
	}
	for _, want := range []string{`<script>alert("x")</script>`, "a]]>b & c", "x\uFFFDy", `tab\there`, "'quoted'", "t<1>"} {
		if !got[want] {
			t.Errorf("no box named %q", want)
		}
	}
	if strings.Count(buf.String(), "]]>") != 1 {
		t.Errorf("the script's CDATA section is not the only one")
	}
}

// TestSVGScript checks the embedded script's setup line and that the
// script cannot end its CDATA section early.
func TestSVGScript(t *testing.T) {
	if strings.Contains(svgScript, "]]>") {
		t.Fatal("svg.js contains ]]>")
	}
	var buf bytes.Buffer
	if err := WriteFlameGraphSVG(&buf, testStacks(), SVGOptions{Icicle: true, Width: 800}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "var fg = {width: 800, pad: 10, charWidth: 7.2, textY: 11.5, icicle: true};") {
		t.Errorf("no setup line for svg.js")
	}
}

// TestSVGAllocUnits: the tooltips of an allocation flame graph say
// objects or bytes, not time.
func TestSVGAllocUnits(t *testing.T) {
	frames := rootFirst(ruby("Alloc#objects", "alloc.rb", 3))
	stacks := []merge.Stack{{PID: 1, TID: 1, Comm: "ruby", Period: 3 << 20, Alloc: true, Frames: frames}}
	for unit, want := range map[Unit]string{UnitObjects: "1 sample, 3145728 objects, 100.00%", UnitBytes: "1 sample, 3.0 MiB, 100.00%"} {
		var buf bytes.Buffer
		if err := WriteFlameGraphSVG(&buf, stacks, SVGOptions{Unit: unit}); err != nil {
			t.Fatal(err)
		}
		for _, b := range parseSVG(t, buf.Bytes()) {
			if b.name() == "Alloc#objects" && !strings.HasSuffix(b.title, want) {
				t.Errorf("unit %d: tooltip %q, want it to end %q", unit, b.title, want)
			}
		}
	}
}
