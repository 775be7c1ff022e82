package export

import (
	"bufio"
	_ "embed"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rubyperf/rubyperf/merge"
)

// svgScript is the flame graph's JavaScript: zoom, search, details line.
//
//go:embed svg.js
var svgScript string

// SVGOptions tunes WriteFlameGraphSVG. The zero value draws a 1200-pixel
// wide flame graph, root at the bottom, of CPU time under thread names.
type SVGOptions struct {
	// Title is drawn at the top; "" gives "Flame Graph" ("Icicle Graph"
	// when Icicle is set).
	Title string
	// Subtitle is drawn under the title when not empty.
	Subtitle string
	Root     Root
	Weight   Weight
	// Unit is what the stacks' Period counts, as the frames' tooltips say
	// it: time (the default), objects or bytes allocated.
	Unit Unit
	// Icicle draws the root at the top and the leaves below it.
	Icicle bool
	// Width is the image width in pixels; 0 gives 1200.
	Width int
	// MinWidth is the narrowest frame drawn, in pixels: narrower frames
	// and everything above them are left out (and so not found by a
	// search), which bounds the file to Width/MinWidth frames a level;
	// 0 gives 0.5, half a pixel. flamegraph.pl's default is 0.1, which
	// keeps every sample of a 10,000-sample profile, and makes such files
	// tens of megabytes.
	MinWidth float64
}

// Layout, in pixels.
const (
	svgPad      = 10.0 // left and right margins
	svgFrameH   = 16.0 // one level: a 15-pixel box and a 1-pixel gap
	svgFontSize = 12.0
	svgCharW    = 0.6 * svgFontSize // advance of a monospace glyph
	svgTextY    = 11.5              // baseline below a box's top
)

// svgFrame is one box to draw.
type svgFrame struct {
	n      *node
	x0, x1 float64 // rounded to 0.01 px
	depth  int
}

// WriteFlameGraphSVG writes stacks as a flame graph: a self-contained SVG
// that a browser opens with no other tool. Each box is a frame, as wide as
// its weight, above the frame that called it (below with Icicle), colored
// by kind: Ruby red, C methods orange, native yellow, kernel blue. Hovering
// a box shows its name, sample count, CPU time and share; clicking zooms
// into it and "Reset Zoom" (or Escape) zooms out; "Search" (or Ctrl-F)
// highlights the frames whose names match a regular expression and shows
// the share of the profile they cover.
func WriteFlameGraphSVG(w io.Writer, stacks []merge.Stack, opts SVGOptions) error {
	return writeAll(w, stacks, NewFlameGraph(opts))
}

// FlameGraph builds what WriteFlameGraphSVG writes one stack at a time,
// holding the call tree, never the stacks themselves.
type FlameGraph struct {
	// Options other than Root may change until Write (a subtitle may
	// count the samples).
	Options SVGOptions
	tree    *node
	states  bool // a stack had a state pseudo-frame: the legend shows their colour
}

// NewFlameGraph returns an empty flame graph with opts.
func NewFlameGraph(opts SVGOptions) *FlameGraph {
	return &FlameGraph{Options: opts, tree: newTree()}
}

// Add counts one stack. s is not kept.
func (g *FlameGraph) Add(s *merge.Stack) {
	g.tree.addStack(s, g.Options.Root)
	if s.State != merge.StateUnknown && !g.states {
		for _, f := range s.Frames {
			g.states = g.states || f.Kind == merge.KindState
		}
	}
}

// Samples is how many stacks were added.
func (g *FlameGraph) Samples() uint64 { return g.tree.samples }

// Write draws the flame graph. It is finished by it: Add must not be
// called after.
func (g *FlameGraph) Write(w io.Writer) error {
	opts := g.Options
	width := float64(opts.Width)
	if opts.Width <= 0 {
		width = 1200
	}
	minWidth := opts.MinWidth
	if minWidth <= 0 {
		minWidth = 0.5
	}
	title := opts.Title
	if title == "" {
		title = "Flame Graph"
		if opts.Icicle {
			title = "Icicle Graph"
		}
	}

	tree := g.tree
	tree.finish()
	weight := opts.Weight
	if weight == WeightTime && tree.time == 0 {
		weight = WeightSamples // no stack has a Period: count samples
	}
	total := tree.weight(weight)
	full := width - 2*svgPad
	var frames []svgFrame
	levels := 0
	if total > 0 {
		var walk func(n *node, off uint64, depth int)
		walk = func(n *node, off uint64, depth int) {
			wt := n.weight(weight)
			if float64(wt)/float64(total)*full < minWidth {
				return
			}
			x0 := round2(svgPad + float64(off)/float64(total)*full)
			x1 := round2(svgPad + float64(off+wt)/float64(total)*full)
			if x1 <= x0 {
				return // narrower than the rounding
			}
			frames = append(frames, svgFrame{n: n, x0: x0, x1: x1, depth: depth})
			levels = max(levels, depth+1)
			for _, c := range n.children {
				walk(c, off, depth+1)
				off += c.weight(weight)
			}
		}
		walk(tree, 0, 0)
	}

	// Vertical layout: title, subtitle, controls, frames, details line.
	y := 24.0
	titleY := y
	subY := 0.0
	if opts.Subtitle != "" {
		y += 20
		subY = y
	}
	controlsY := y + 22
	top := controlsY + 10
	detailsY := top + float64(levels)*svgFrameH + 18
	if levels == 0 {
		detailsY += 20
	}
	height := detailsY + 10
	frameY := func(depth int) float64 {
		if opts.Icicle {
			return top + float64(depth)*svgFrameH
		}
		return top + float64(levels-1-depth)*svgFrameH
	}

	bw := bufio.NewWriter(w)
	sw := svgWriter{bw, opts.Unit}
	fmt.Fprintf(bw, `<?xml version="1.0" standalone="no"?>
<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s">
`, num(width), num(height), num(width), num(height))
	bw.WriteString("<title>")
	sw.text(title)
	bw.WriteString("</title>\n")
	bw.WriteString(`<style>
text{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px;fill:#000}
#frames g{cursor:pointer}
#frames g:hover rect{stroke:#222;stroke-width:.6}
#frames g.m rect{fill:#d21ee0}
#frames g.p{opacity:.55}
#title{font-size:17px;text-anchor:middle}
#subtitle{fill:#555;text-anchor:middle}
.btn{cursor:pointer;fill:#2456a6;text-decoration:underline}
.hide{display:none}
</style>
`)
	fmt.Fprintf(bw, `<rect x="0" y="0" width="%s" height="%s" fill="#f6f6f2"/>
`, num(width), num(height))
	fmt.Fprintf(bw, `<text id="title" x="%s" y="%s">`, num(width/2), num(titleY))
	sw.text(title)
	bw.WriteString("</text>\n")
	if opts.Subtitle != "" {
		fmt.Fprintf(bw, `<text id="subtitle" x="%s" y="%s">`, num(width/2), num(subY))
		sw.text(opts.Subtitle)
		bw.WriteString("</text>\n")
	}
	fmt.Fprintf(bw, `<text id="unzoom" class="btn hide" x="%s" y="%s">Reset Zoom</text>
<text id="search" class="btn" x="%s" y="%s" text-anchor="end">Search</text>
`, num(svgPad), num(controlsY), num(width-svgPad), num(controlsY))
	writeLegend(bw, width, controlsY, g.states)

	bw.WriteString(`<g id="frames">` + "\n")
	for _, f := range frames {
		sw.frame(f, frameY(f.depth), tree, weight)
	}
	bw.WriteString("</g>\n")
	if levels == 0 {
		fmt.Fprintf(bw, `<text x="%s" y="%s" text-anchor="middle">No samples</text>
`, num(width/2), num(top+20))
	}
	fmt.Fprintf(bw, `<text id="details" x="%s" y="%s"> </text>
<text id="matched" x="%s" y="%s" text-anchor="end"></text>
`, num(svgPad), num(detailsY), num(width-svgPad), num(detailsY))

	fmt.Fprintf(bw, "<script type=\"text/ecmascript\"><![CDATA[\nvar fg = {width: %s, pad: %s, charWidth: %s, textY: %s, icicle: %t};\n",
		num(width), num(svgPad), num(svgCharW), num(svgTextY), opts.Icicle)
	bw.WriteString(svgScript)
	bw.WriteString("]]></script>\n</svg>\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write flame graph: %w", err)
	}
	return nil
}

// svgWriter writes escaped text.
type svgWriter struct {
	*bufio.Writer
	unit Unit // what the stacks' Period counts
}

// frame writes one box: a group with a tooltip, a rectangle, and the
// name when it fits.
func (sw svgWriter) frame(f svgFrame, y float64, tree *node, wt Weight) {
	n := f.n
	sw.WriteString("<g><title>")
	sw.text(n.name)
	switch {
	case n == tree:
	case n.thread:
		sw.WriteString("\nthread")
	default:
		sw.WriteString("\n" + kindLabel(n.kind))
		if n.file != "" {
			sw.WriteString(" · ")
			sw.text(n.file)
		}
	}
	share := 100 * float64(n.weight(wt)) / float64(tree.weight(wt))
	fmt.Fprintf(sw, "\n%d %s, %s, %.2f%%</title>", n.samples, plural(n.samples, "sample"), sw.unit.amount(n.time), share)
	fmt.Fprintf(sw, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`,
		num(f.x0), num(y), num(round2(f.x1-f.x0)), num(svgFrameH-1), frameColor(n))
	if label := fitLabel(n.name, f.x1-f.x0); label != "" {
		fmt.Fprintf(sw, `<text x="%s" y="%s">`, num(round2(f.x0+3)), num(y+svgTextY))
		sw.text(label)
		sw.WriteString("</text>")
	}
	sw.WriteString("</g>\n")
}

// text writes s escaped for XML character data and attribute values.
// Names are Printable, so only the markup characters and the
// two non-characters XML forbids are left to handle.
func (sw svgWriter) text(s string) {
	for _, r := range s {
		switch r {
		case '&':
			sw.WriteString("&amp;")
		case '<':
			sw.WriteString("&lt;")
		case '>':
			sw.WriteString("&gt;")
		case '"':
			sw.WriteString("&quot;")
		case 0xFFFE, 0xFFFF:
			sw.WriteRune(utf8.RuneError)
		default:
			sw.WriteRune(r)
		}
	}
}

// fitLabel is name, or name shortened to fit a box w pixels wide
// ("Foo#ba.."), or "" when less than three characters of it would show.
// svg.js does the same on zoom.
func fitLabel(name string, w float64) string {
	fit := int(math.Floor((w - 6) / svgCharW))
	switch {
	case fit < 1:
		return ""
	case utf8.RuneCountInString(name) <= fit:
		return name
	case fit < 5:
		return ""
	}
	return string([]rune(name)[:fit-2]) + ".."
}

// The palettes, one per frame kind: each a base color and how far a
// frame's hash moves it, so that neighbors differ but kinds stay apart.
type palette struct{ r, g, b, dr, dg, db float64 }

var (
	paletteRuby    = palette{200, 45, 60, 50, 50, 45}   // reds
	paletteCFunc   = palette{240, 130, 30, 15, 45, 30}  // oranges
	paletteNative  = palette{205, 200, 70, 35, 30, 40}  // yellows
	paletteKernel  = palette{95, 150, 215, 50, 45, 35}  // blues
	paletteState   = palette{120, 190, 120, 30, 30, 30} // greens: (garbage collection), (blocked)
	paletteThread  = palette{175, 175, 185, 35, 35, 35}
	paletteUnknown = palette{165, 165, 165, 35, 35, 35}
)

func kindPalette(k merge.Kind) palette {
	switch k {
	case merge.KindRuby:
		return paletteRuby
	case merge.KindCFunc:
		return paletteCFunc
	case merge.KindNative:
		return paletteNative
	case merge.KindKernel:
		return paletteKernel
	case merge.KindState:
		return paletteState
	}
	return paletteUnknown
}

// color returns the palette's color at v1, v2 in [0, 1].
func (p palette) color(v1, v2 float64) string {
	c := func(base, d, v float64) int { return int(math.Min(255, base+d*v)) }
	return fmt.Sprintf("#%02x%02x%02x", c(p.r, p.dr, v1), c(p.g, p.dg, v2), c(p.b, p.db, (v1+v2)/2))
}

// frameColor colors n by kind, varied by a hash of its name so that the
// same function has the same color everywhere.
func frameColor(n *node) string {
	p := kindPalette(n.kind)
	if n.thread || n.kind == 0 && n.name == "all" {
		p = paletteThread
	}
	h := fnv.New32a()
	h.Write([]byte(n.name))
	v := h.Sum32()
	return p.color(float64(v&0xffff)/0xffff, float64(v>>16)/0xffff)
}

// writeLegend draws a swatch and a label per kind, centered on the
// controls line.
func writeLegend(bw *bufio.Writer, width, y float64, states bool) {
	kinds := []merge.Kind{merge.KindRuby, merge.KindCFunc, merge.KindNative, merge.KindKernel}
	if states { // the profile has state pseudo-frames
		kinds = append(kinds, merge.KindState)
	}
	const swatch, gap = 11.0, 18.0
	total := 0.0
	for i, k := range kinds {
		if i > 0 {
			total += gap
		}
		total += swatch + 4 + float64(len(kindLabel(k)))*svgCharW
	}
	x := round2(width/2 - total/2)
	bw.WriteString(`<g id="legend">`)
	for _, k := range kinds {
		fmt.Fprintf(bw, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/><text x="%s" y="%s">%s</text>`,
			num(x), num(y-swatch+1), num(swatch), num(swatch), kindPalette(k).color(0.5, 0.5),
			num(round2(x+swatch+4)), num(y), kindLabel(k))
		x = round2(x + swatch + 4 + float64(len(kindLabel(k)))*svgCharW + gap)
	}
	bw.WriteString("</g>\n")
}

// round2 rounds to hundredths of a pixel.
func round2(v float64) float64 { return math.Round(v*100) / 100 }

// num formats a coordinate: at most two decimals, no trailing zeros.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

func plural(n uint64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// duration formats ns for people: "950 ns", "12.5 µs", "101.01 ms", "3.20 s".
func duration(ns uint64) string {
	switch {
	case ns < 1e3:
		return strconv.FormatUint(ns, 10) + " ns"
	case ns < 1e6:
		return strconv.FormatFloat(float64(ns)/1e3, 'f', 2, 64) + " µs"
	case ns < 1e9:
		return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 2, 64) + " s"
}
