package main

import (
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

	"github.com/chromedp/chromedp"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// speedscopeApp is the directory of speedscope's built web app, as the npm
// package ships it (scripts/viewers.sh installs it).
func speedscopeApp(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testruby.Cache(), "npm", "node_modules", "speedscope", "dist", "release")
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
		testskip.IfNotSupported(t, testskip.Missing("speedscope's web app in "+dir, "scripts/viewers.sh installs it (make test does)", err))
	}
	return dir
}

// TestBrowserSpeedscope loads a converted recording in speedscope itself,
// as its profileURL link does, and checks that speedscope imports it (no
// error, no alert), names it, and lists the workload's Ruby methods in its
// Sandwich view, the one view speedscope draws as a DOM table rather than on
// a canvas.
func TestBrowserSpeedscope(t *testing.T) {
	app := speedscopeApp(t)
	needChromium(t)
	profile, data := convertedWorkload(t, "speedscope")
	var file speedscopeNames
	if b, err := os.ReadFile(profile); err != nil || json.Unmarshal(b, &file) != nil || len(file.Profiles) == 0 {
		t.Fatalf("read %s: %v", profile, err)
	}
	if file.Name != data {
		t.Errorf("speedscope file name %q, want the recording's %q", file.Name, data)
	}
	serializer := slices.IndexFunc(file.Profiles, func(p speedscopeName) bool { return strings.HasPrefix(p.Name, "serializer ") })
	if serializer < 0 {
		t.Fatalf("no profile of the workload's serializer thread in %s", profile)
	}

	// The app and the profile from one server: speedscope fetches the
	// profileURL from the page, so they share an origin.
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(app)))
	mux.HandleFunc("/profiles/rubyperf.speedscope.json", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, profile)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tb := newTab(t)
	tb.do(t, "open speedscope", chromedp.Navigate(srv.URL+"/index.html#profileURL="+
		url.QueryEscape(srv.URL+"/profiles/rubyperf.speedscope.json")))
	// speedscope titles the page after the file's name once it imported
	// it, and shows "Something went wrong" when it could not.
	title := file.Name + " - speedscope"
	tb.waitFor(t, "speedscope to import the profile", fmt.Sprintf(
		`document.title === %s || document.body.innerText.includes('Something went wrong')`, jsString(title)))
	if text := eval[string](t, tb, "page text", `document.body.innerText`); strings.Contains(text, "Something went wrong") {
		t.Fatalf("speedscope could not import the file: %q", text)
	}
	toolbar := func(i int) string { return fmt.Sprintf("%s (%d/%d)", file.Profiles[i].Name, i+1, len(file.Profiles)) }
	tb.waitFor(t, "the first thread's name in the toolbar", fmt.Sprintf(`document.body.innerText.includes(%s)`, jsString(toolbar(0))))
	if !tb.checkErrors(t) {
		t.FailNow()
	}

	// Sandwich: a table of every function of the thread shown.
	tb.clickAt(t, "the Sandwich tab", `[...document.querySelectorAll('div')].find(d => d.children.length === 1 && d.textContent.endsWith('Sandwich'))`)
	tb.waitFor(t, "the Sandwich table", `[...document.querySelectorAll('th')].some(th => th.textContent === 'Symbol Name')`)
	names := tb.sandwichNames(t, "")
	// To the serializer thread as a person goes, with "n" (the next thread).
	for i := 1; i <= serializer; i++ {
		tb.do(t, "next thread", chromedp.KeyEvent("n"))
		tb.waitFor(t, "thread "+file.Profiles[i].Name, fmt.Sprintf(`document.body.innerText.includes(%s)`, jsString(toolbar(i))))
	}
	names = append(names, tb.sandwichNames(t, "")...)
	for _, want := range workloadMethods {
		if !slices.Contains(names, want) {
			t.Errorf("speedscope's Sandwich view of the main and serializer threads does not list %s; it lists %d functions: %q",
				want, len(names), names[:min(len(names), 30)])
		}
	}

	// Back on the main thread, Fib.fib selected: its callers and callees
	// drawn beside the table.
	for i := serializer; i > 0; i-- {
		tb.do(t, "previous thread", chromedp.KeyEvent("p"))
	}
	tb.waitFor(t, "the main thread", fmt.Sprintf(`document.body.innerText.includes(%s)`, jsString(toolbar(0))))
	tb.sandwichNames(t, "Fib.fib")
	tb.clickAt(t, "the Fib.fib row", sandwichScroller+`.querySelectorAll('tr').values().find(tr => tr.lastElementChild.textContent === 'Fib.fib')`)
	tb.waitFor(t, "Fib.fib's callers and callees", `document.body.innerText.includes('Callers') && document.body.innerText.includes('Callees')`)
	tb.screenshot(t, "speedscope.png", false)

	tb.checkErrors(t)
}

// speedscopeNames is what the test reads of a speedscope file: its name
// and its profiles' (one per thread).
type speedscopeNames struct {
	Name     string           `json:"name"`
	Profiles []speedscopeName `json:"profiles"`
}

type speedscopeName struct {
	Name string `json:"name"`
}

// sandwichScroller is the scrolling list of the Sandwich table, which
// renders only the rows in view.
const sandwichScroller = `[...document.querySelectorAll('th')].find(th => th.textContent === 'Symbol Name').closest('table').nextElementSibling`

// sandwichNames scrolls the Sandwich table from its top and returns every
// function name it shows, stopping with the row named stop in the middle
// of the list ("": at the end).
func (tb *tab) sandwichNames(t *testing.T, stop string) []string {
	t.Helper()
	names, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`(async () => {
		const list = `+sandwichScroller+`, stop = `+jsString(stop)+`, names = new Set();
		const settle = () => new Promise(r => setTimeout(() => requestAnimationFrame(() => r()), 30));
		list.scrollTop = 0;
		for (let i = 0; i < 10000; i++) {
			await settle();
			for (const tr of list.querySelectorAll('tr')) names.add(tr.lastElementChild.textContent);
			const row = stop && [...list.querySelectorAll('tr')].find(tr => tr.lastElementChild.textContent === stop);
			if (row) { // to the middle of the list, where a person would look for it
				list.scrollTop += row.getBoundingClientRect().top - list.getBoundingClientRect().top - list.clientHeight / 2;
				await settle();
				break;
			}
			if (list.scrollTop + list.clientHeight >= list.scrollHeight - 1) break;
			list.scrollTop += list.clientHeight / 2;
		}
		return [...names];
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("read the Sandwich table: %v", err)
	}
	if stop != "" && !slices.Contains(names, stop) {
		t.Fatalf("the Sandwich table has no row %s", stop)
	}
	return names
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
