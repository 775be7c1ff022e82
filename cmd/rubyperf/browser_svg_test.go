package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// svgBox is one frame of the flame graph as the browser shows it.
type svgBox struct {
	Name     string  // the tooltip's first line
	Share    float64 // the tooltip's share of the profile, in percent
	X, W, Y  float64 // the rectangle's attributes
	Box      float64 // its rendered width, in CSS pixels
	Label    string  // the text drawn in it
	LabelBox float64 // the text's rendered width
	Shown    bool    // not display:none
	Opacity  float64
	Matched  bool // highlighted by a search
	Fill     string
}

// svgFramesJS reads every frame of the flame graph from the page.
const svgFramesJS = `[...document.querySelectorAll('#frames > g')].map(g => {
	const r = g.querySelector('rect'), t = g.querySelector('text'), tip = g.querySelector('title').textContent.split('\n');
	const share = /([0-9.]+)%$/.exec(tip[tip.length - 1]);
	return {
		Name: tip[0], Share: share ? +share[1] : -1,
		X: +r.getAttribute('x'), W: +r.getAttribute('width'), Y: +r.getAttribute('y'),
		Box: r.getBoundingClientRect().width,
		Label: t ? t.textContent : '', LabelBox: t ? t.getBoundingClientRect().width : 0,
		Shown: getComputedStyle(g).display !== 'none', Opacity: +getComputedStyle(g).opacity,
		Matched: g.classList.contains('m'), Fill: getComputedStyle(r).fill,
	};
})`

// searchFill is the color svg.go's style gives frames a search matched.
const searchFill = "rgb(210, 30, 224)" // #d21ee0

// TestBrowserSVG opens convert's SVG flame graph of a real recording in
// Chromium and uses it as a person does: reads the frames, searches with
// the Search button's prompt, clicks a frame to zoom and Reset Zoom to go
// back, checking after each step what the page draws.
func TestBrowserSVG(t *testing.T) {
	needChromium(t)
	svg, _ := convertedWorkload(t, "svg")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, svg) // as image/svg+xml, by its name
	}))
	defer srv.Close()

	tb := newTab(t)
	tb.do(t, "open the SVG", chromedp.Navigate(srv.URL+"/rubyperf.svg"))
	tb.waitFor(t, "the frames", `document.querySelectorAll('#frames > g').length > 0`)
	frames := func(what string) []svgBox { return eval[[]svgBox](t, tb, what, svgFramesJS) }
	orig := frames("read the frames")
	if !tb.checkErrors(t) {
		t.FailNow() // the script failed: nothing would respond
	}
	tb.screenshot(t, "flamegraph-svg.png", true)

	// The root spans the graph: its rendered width is what "full width" is
	// on this screen.
	full := eval[float64](t, tb, "the graph's width", `fg.width - 2 * fg.pad`)
	if orig[0].Name != "all" || math.Abs(orig[0].W-full) > 0.01 || orig[0].Box < full*0.9 {
		t.Fatalf("the first frame is not the root spanning the graph: %+v (full width %v)", orig[0], full)
	}
	fullBox := orig[0].Box

	// The workload's methods are drawn, named in their boxes.
	for _, name := range workloadMethods {
		drawn, labeled := false, false
		for _, f := range orig {
			if f.Name == name && f.Shown && f.Box > 0 {
				drawn = true
				labeled = labeled || f.Label == name && f.LabelBox > 0
			}
		}
		if !drawn || !labeled {
			t.Errorf("%s: drawn %v, named in its box %v", name, drawn, labeled)
		}
	}

	t.Run("search", func(t *testing.T) { svgSearch(t, tb, frames, full) })
	t.Run("zoom", func(t *testing.T) { svgZoom(t, tb, frames, orig, full, fullBox) })
	tb.checkErrors(t)
}

// svgSearch searches for Fib.fib through the Search button and its
// prompt, checks what is highlighted and the share reported, then clears
// the search.
func svgSearch(t *testing.T, tb *tab, frames func(string) []svgBox, full float64) {
	const pattern = "Fib.fib"
	re := regexp.MustCompile(pattern)
	tb.answerPrompts(pattern)
	tb.clickAt(t, "Search", `document.getElementById('search')`)
	select {
	case d := <-tb.dialogs:
		if d.Type != "prompt" {
			t.Fatalf("Search opened a %s dialog (%q), not a prompt", d.Type, d.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("clicking Search opened no prompt")
	}
	tb.waitFor(t, "the matched share", `document.getElementById('matched').textContent !== ''`)

	got := frames("read the frames after the search")
	var matched []svgBox
	wrong := &capped{t: t}
	for _, f := range got {
		want := re.MatchString(f.Name)
		if f.Matched != want || want != (f.Fill == searchFill) {
			wrong.Errorf("%s: highlighted %v (fill %s), want %v", f.Name, f.Matched, f.Fill, want)
		}
		if want {
			matched = append(matched, f)
		}
	}
	wrong.done()
	if len(matched) == 0 {
		t.Fatalf("no frame matches %s", pattern)
	}
	// The share: the matched frames that no other matched frame calls
	// cover it, each with the share its tooltip gives (computed by svg.go,
	// not by the script under test).
	outer, share := 0, 0.0
	for _, f := range matched {
		nested := false
		for _, g := range matched {
			nested = nested || g.Y > f.Y && g.X <= f.X+0.005 && g.X+g.W >= f.X+f.W-0.005
		}
		if !nested {
			outer++
			share += f.Share
		}
	}
	text := eval[string](t, tb, "the matched share", `document.getElementById('matched').textContent`)
	m := regexp.MustCompile(`^Matched: ([0-9.]+)% \((\d+) frames? matching /` + regexp.QuoteMeta(pattern) + `/\)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("matched line %q", text)
	}
	pct, _ := strconv.ParseFloat(m[1], 64)
	n, _ := strconv.Atoi(m[2])
	if n != len(matched) || pct <= 0 || math.Abs(pct-share) > 0.01*float64(outer)+0.02 {
		t.Errorf("matched line %q: want %d frames and %.2f%% (the tooltips' shares of the %d outermost)", text, len(matched), share, outer)
	}
	if b := eval[string](t, tb, "the Search button", `document.getElementById('search').textContent`); b != "Clear Search" {
		t.Errorf("the Search button reads %q during a search", b)
	}
	tb.clickAt(t, "Clear Search", `document.getElementById('search')`)
	tb.waitFor(t, "the search to clear", `document.getElementById('matched').textContent === ''`)
	for _, f := range frames("read the frames after clearing") {
		if f.Matched || f.Fill == searchFill {
			t.Errorf("%s still highlighted after Clear Search", f.Name)
			break
		}
	}
}

// svgZoom clicks the widest Workload#serialize frame, checks that it then
// spans the graph with its callees scaled along, its callers stretched
// and dimmed, and every other frame hidden; then clicks Reset Zoom and
// checks that every frame is back where it was.
func svgZoom(t *testing.T, tb *tab, frames func(string) []svgBox, orig []svgBox, full, fullBox float64) {
	const name = "Workload#serialize"
	z := -1
	for i, f := range orig {
		if f.Name == name && (z < 0 || f.W > orig[z].W) {
			z = i
		}
	}
	if z < 0 || orig[z].W > full-1 {
		t.Fatalf("no %s frame narrower than the graph to zoom into", name)
	}
	zf := orig[z]
	tb.clickAt(t, name, `document.querySelectorAll('#frames > g')[`+strconv.Itoa(z)+`].querySelector('rect')`)
	tb.waitFor(t, "the zoom", `getComputedStyle(document.getElementById('unzoom')).display !== 'none'`)

	got := frames("read the zoomed frames")
	if len(got) != len(orig) {
		t.Fatalf("%d frames after the zoom, %d before", len(got), len(orig))
	}
	if f := got[z]; !f.Shown || math.Abs(f.W-full) > 0.01 || math.Abs(f.Box-fullBox) > 1 || f.Opacity != 1 {
		t.Errorf("the zoomed frame: %+v, want it spanning the graph (%v, %v pixels)", f, full, fullBox)
	}
	const eps = 0.005 // positions are rounded to 0.01
	scale := full / zf.W
	hidden, wrong := 0, &capped{t: t}
	for i, o := range orig {
		f := got[i]
		switch {
		case i == z:
		case o.Y > zf.Y && o.X <= zf.X+eps && o.X+o.W >= zf.X+zf.W-eps: // a caller (root at the bottom)
			if !f.Shown || math.Abs(f.W-full) > 0.01 || f.Opacity >= 1 {
				wrong.Errorf("caller %s: %+v, want it stretched and dimmed", o.Name, f)
			}
		case o.Y < zf.Y && o.X >= zf.X-eps && o.X+o.W <= zf.X+zf.W+eps: // a callee
			if !f.Shown || math.Abs(f.W-o.W*scale) > 0.02 || f.Opacity != 1 {
				wrong.Errorf("callee %s: %+v, want it %.2f wide", o.Name, f, o.W*scale)
			}
		default:
			if f.Shown && f.Box > 0 {
				wrong.Errorf("%s outside the zoomed frame is still drawn: %+v", o.Name, f)
			}
			hidden++
		}
	}
	wrong.done()
	if hidden == 0 {
		t.Errorf("zooming into %s hid no frame", name)
	}
	// The pointer off the graph, so the details line does not show the
	// hovered frame's source path (this machine's).
	tb.do(t, "move the mouse away", chromedp.MouseEvent(chromedp.MouseMoved, 1, 1))
	tb.screenshot(t, "flamegraph-svg-zoom.png", true)

	tb.clickAt(t, "Reset Zoom", `document.getElementById('unzoom')`)
	tb.waitFor(t, "the zoom to reset", `getComputedStyle(document.getElementById('unzoom')).display === 'none'`)
	got = frames("read the frames after Reset Zoom")
	wrong = &capped{t: t}
	for i, o := range orig {
		f := got[i]
		if f.X != o.X || f.W != o.W || !f.Shown || f.Opacity != 1 || math.Abs(f.Box-o.Box) > 0.5 || f.Label != o.Label {
			wrong.Errorf("%s after Reset Zoom: %+v, was %+v", o.Name, f, o)
		}
	}
	wrong.done()
}

// capped reports the first few errors of a check over every frame, and
// then only how many more there were: a broken view breaks hundreds.
type capped struct {
	t *testing.T
	n int
}

func (c *capped) Errorf(format string, args ...any) {
	c.t.Helper()
	if c.n++; c.n <= 5 {
		c.t.Errorf(format, args...)
	}
}

func (c *capped) done() {
	c.t.Helper()
	if c.n > 5 {
		c.t.Errorf("and %d more", c.n-5)
	}
}
