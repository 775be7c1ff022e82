package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/recording"
)

// TestBrowserWallSVG opens the SVG flame graph of a wall-clock recording
// (record --wall) of threads that compute, allocate, sleep and wait for a
// pipe, in Chromium: the state pseudo-frames are drawn, in their own
// colour, with the legend naming it, and the sleeping thread's time is
// under (blocked). The screenshot is docs/usage.md's wall-clock picture.
func TestBrowserWallSVG(t *testing.T) {
	needChromium(t)
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "source-3.3-static")
	dir := t.TempDir()
	data := filepath.Join(dir, "rubyperf.data")
	script, _ := filepath.Abs("../../testdata/ruby/states.rb")
	if _, err := recording.Record(context.Background(), recording.Options{
		Command: []string{r.Exe, script, "mixed", "3"}, Frequency: 99, Wall: true, Duration: 20 * time.Second,
		Output: data}); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "wall.svg")
	var stdout, stderr bytes.Buffer
	t.Chdir(dir) // the graph's title names the recording as given
	if code := run([]string{"convert", "-i", "rubyperf.data", "-f", "svg", "--ruby-only", "-o", svg}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert: %s", stderr.String())
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, svg) }))
	defer srv.Close()
	tb := newTab(t)
	tb.do(t, "open the SVG", chromedp.Navigate(srv.URL+"/wall.svg"))
	tb.waitFor(t, "the frames", `document.querySelectorAll('#frames > g').length > 0`)
	frames := eval[[]svgBox](t, tb, "read the frames", svgFramesJS)
	if !tb.checkErrors(t) {
		t.FailNow()
	}
	share := map[string]float64{}
	fill := map[string]string{}
	for _, f := range frames {
		share[f.Name] += f.Share
		fill[f.Name] = f.Fill
	}
	for _, name := range []string{merge.BlockedName, merge.GVLWaitName, merge.GCName} {
		if share[name] <= 0 {
			t.Errorf("no %s frame drawn (frames: %d)", name, len(frames))
		}
	}
	// The graph draws (blocked) over the share of wall-clock time the
	// recording says its threads were blocked.
	var blocked, all uint64
	if _, err := readback.ReadStacks(data, readback.ReadOptions{Merge: merge.Options{View: merge.ViewRubyOnly}}, func(s merge.Stack) error {
		all += s.Period
		if s.State == merge.StateBlocked {
			blocked += s.Period
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := 100 * float64(blocked) / float64(all)
	t.Logf("(blocked): %.1f%% drawn, %.1f%% of the recording's wall-clock time", share[merge.BlockedName], want)
	if want < 10 || !near(share[merge.BlockedName], want, 1) {
		t.Errorf("(blocked) drawn over %.1f%%, the recording has %.1f%% blocked", share[merge.BlockedName], want)
	}
	if fill[merge.BlockedName] == fill["Kernel#sleep"] {
		t.Errorf("(blocked) is drawn in the colour of a Ruby frame (%s)", fill[merge.BlockedName])
	}
	legend := eval[string](t, tb, "the legend", `document.documentElement.textContent`)
	if !strings.Contains(legend, "thread state") {
		t.Error("the legend does not name the state frames' colour")
	}
	tb.screenshot(t, "flamegraph-wall.png", true)
}
