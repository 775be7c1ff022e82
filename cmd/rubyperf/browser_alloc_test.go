package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/recording"
)

// allocMethods are the allocating methods of testdata/ruby/alloc.rb.
var allocMethods = []string{"Alloc#objects", "Alloc#arrays", "Alloc#strings", "Alloc#hashes"}

// allocRecording records testdata/ruby/alloc.rb's allocations (record
// --alloc, no CPU samples) for 5 s, into dir/rubyperf.data.
func allocRecording(t *testing.T, dir string) string {
	t.Helper()
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.3")
	data := filepath.Join(dir, "rubyperf.data")
	script, _ := filepath.Abs("../../testdata/ruby/alloc.rb")
	if _, err := recording.Record(context.Background(), recording.Options{
		Command: []string{r.Exe, script, "10", filepath.Join(dir, "counts.json")}, Alloc: bpf.DefaultAllocEvery, NoCPU: true,
		Duration: 5 * time.Second, Output: data}); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBrowserAlloc opens the allocation flame graph SVG and speedscope's
// view of one recording of allocations in Chromium: the SVG draws each
// allocating method over the share of the objects the recording gives it
// (within half a point) and says its weight is objects; speedscope
// imports the file, lists the methods in its Sandwich view, and weighs in
// objects, not time.
func TestBrowserAlloc(t *testing.T) {
	needChromium(t)
	dir := t.TempDir()
	data := allocRecording(t, dir)
	t.Chdir(dir)
	want := totalShares(allocProfile(t, data), 0)
	var stdout, stderr bytes.Buffer
	for _, f := range []string{"svg", "speedscope"} {
		if code := run([]string{"convert", "-i", "rubyperf.data", "-f", f, "--ruby-only", "-o", "alloc." + f}, &stdout, &stderr); code != 0 {
			t.Fatalf("convert -f %s: %s", f, stderr.String())
		}
	}

	t.Run("svg", func(t *testing.T) {
		// The SVG for any path: the browser asks for /favicon.ico too, and
		// a 404 is a page error.
		svg := filepath.Join(dir, "alloc.svg")
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, svg) }))
		defer srv.Close()
		tb := newTab(t)
		tb.do(t, "open the SVG", chromedp.Navigate(srv.URL+"/alloc.svg"))
		tb.waitFor(t, "the frames", `document.querySelectorAll('#frames > g').length > 0`)
		frames := eval[[]svgBox](t, tb, "read the frames", svgFramesJS)
		if !tb.checkErrors(t) {
			t.FailNow()
		}
		drawn := map[string]float64{}
		for _, f := range frames {
			drawn[f.Name] += f.Share
		}
		for _, m := range allocMethods {
			t.Logf("%s: drawn over %.2f%%, %.2f%% of the objects", m, drawn[m], want[m])
			if want[m] <= 0 || !near(drawn[m], want[m], 0.5) {
				t.Errorf("%s drawn over %.2f%% of the graph, the recording gives it %.2f%% of the objects", m, drawn[m], want[m])
			}
		}
		text := eval[string](t, tb, "the graph's text", `document.documentElement.textContent`)
		if !strings.Contains(text, "objects") {
			t.Error("the allocation flame graph never says its weight is objects")
		}
		tb.screenshot(t, "flamegraph-alloc.png", true)
	})

	t.Run("speedscope", func(t *testing.T) {
		app := speedscopeApp(t)
		var file struct {
			Name     string `json:"name"`
			Profiles []struct {
				Name string `json:"name"`
				Unit string `json:"unit"`
			} `json:"profiles"`
		}
		if b, err := os.ReadFile(filepath.Join(dir, "alloc.speedscope")); err != nil || json.Unmarshal(b, &file) != nil || len(file.Profiles) == 0 {
			t.Fatalf("read alloc.speedscope: %v", err)
		}
		for _, p := range file.Profiles {
			if p.Unit != "none" && p.Unit != "bytes" {
				t.Errorf("profile %q weighs in %q, want a count of objects (speedscope's \"none\")", p.Name, p.Unit)
			}
		}
		mux := http.NewServeMux()
		mux.Handle("/", http.FileServer(http.Dir(app)))
		mux.HandleFunc("/profiles/alloc.speedscope.json", func(w http.ResponseWriter, r *http.Request) {
			http.ServeFile(w, r, filepath.Join(dir, "alloc.speedscope"))
		})
		srv := httptest.NewServer(mux)
		defer srv.Close()
		tb := newTab(t)
		tb.do(t, "open speedscope", chromedp.Navigate(srv.URL+"/index.html#profileURL="+
			url.QueryEscape(srv.URL+"/profiles/alloc.speedscope.json")))
		title := file.Name + " - speedscope"
		tb.waitFor(t, "speedscope to import the profile", fmt.Sprintf(
			`document.title === %s || document.body.innerText.includes('Something went wrong')`, jsString(title)))
		if text := eval[string](t, tb, "page text", `document.body.innerText`); strings.Contains(text, "Something went wrong") {
			t.Fatalf("speedscope could not import the file: %q", text)
		}
		if !tb.checkErrors(t) {
			t.FailNow()
		}
		tb.clickAt(t, "the Sandwich tab", `[...document.querySelectorAll('div')].find(d => d.children.length === 1 && d.textContent.endsWith('Sandwich'))`)
		tb.waitFor(t, "the Sandwich table", `[...document.querySelectorAll('th')].some(th => th.textContent === 'Symbol Name')`)
		names := tb.sandwichNames(t, "")
		for _, m := range allocMethods {
			if !slices.Contains(names, m) {
				t.Errorf("speedscope's Sandwich view does not list %s; it lists %q", m, names[:min(len(names), 30)])
			}
		}
		tb.screenshot(t, "speedscope-alloc.png", false)
		tb.checkErrors(t)
	})
}
