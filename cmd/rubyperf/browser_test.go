package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// The browser tests open what convert writes in the viewer it is for, in
// headless Chromium, and check what renders: a file whose bytes look right
// can still draw nothing, throw in its script, or fail speedscope's import.

var updateScreenshots = flag.Bool("update-screenshots", false,
	"write the browser tests' screenshots into docs/screenshots (shown in the README and docs/)")

// screenshotDir is docs/screenshots, found before a test changes directory.
var screenshotDir, _ = filepath.Abs(filepath.Join("..", "..", "docs", "screenshots"))

const (
	chromiumPath = "/usr/bin/chromium" // Debian's chromium package (scripts/deps.sh)
	// browserTimeout bounds everything one test does in the browser, from
	// its start to the last check, so a view that never renders fails the
	// test instead of hanging it.
	browserTimeout = 60 * time.Second
	// The viewport: wide enough for the SVG's 1200 pixels, short enough to
	// keep screenshots small.
	viewportW, viewportH = 1200, 700
)

// workloadMethods are Ruby methods of testdata/ruby/workload.rb that every
// view of its recording names, whatever native frames it shows: the main
// thread's and the serializer thread's.
var workloadMethods = []string{"Fib.fib", "Workload#step", "Workload#serialize"}

// needChromium checks for the browser before a test spends seconds
// recording.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testskip.IfNotSupported(t, testskip.Missing("chromium at "+chromiumPath, "Debian chromium; scripts/deps.sh installs it (make test does)", err))
	}
}

// convertedWorkload records the bundled workload and converts the
// recording with rubyperf convert -f format, the code path users run, as
// they run it: in the recording's directory, with the default file names
// (which the SVG's title and speedscope's file name show). It returns the
// converted file and the recording's name.
func convertedWorkload(t *testing.T, format string) (out, data string) {
	t.Helper()
	file, _ := workloadRecording(t, 2*time.Second)
	t.Chdir(filepath.Dir(file))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"convert", "-f", format}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert -f %s: exit %d: %s", format, code, stderr.String())
	}
	return filepath.Join(filepath.Dir(file), convertDefaults[format]), filepath.Base(file)
}

// tab is one page of a headless Chromium started for one test. It keeps
// what the page reported as an error, and answers its dialogs.
type tab struct {
	ctx context.Context

	mu      sync.Mutex
	errs    []string // console errors, uncaught exceptions, browser log errors
	console []string // the other console messages, shown when a test fails
	prompt  string   // the answer to the next prompt dialog
	// dialogs receives each dialog the page opened, after it was answered.
	dialogs chan page.EventJavascriptDialogOpening
}

// newTab starts Chromium; it is stopped when the test ends.
func newTab(t *testing.T) *tab {
	t.Helper()
	needChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		// Nothing but the test server: no update checks, no sync, no QUIC probes.
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(viewportW, viewportH),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	tb := &tab{dialogs: make(chan page.EventJavascriptDialogOpening, 8)}
	// WithListener sees the tab's events from its first one on.
	tctx, tcancel := chromedp.NewContext(actx, chromedp.WithListener(tb.listen))
	t.Cleanup(tcancel)
	t.Cleanup(func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		if t.Failed() && len(tb.console) > 0 {
			t.Logf("the page's console:\n%s", strings.Join(tb.console, "\n"))
		}
	})
	tb.ctx = tctx
	// The window's size includes what headless Chromium keeps for its
	// toolbars; the page's is set here.
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(viewportW, viewportH)); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	// A dialog blocks the page, and the click that opened it, until it is
	// answered: answer each one at once from here.
	go func() {
		for ev, err := range chromedp.Events(tctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			tb.mu.Lock()
			answer := tb.prompt
			tb.mu.Unlock()
			_, err = chromedp.Call(tctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true, PromptText: answer})
			if err != nil {
				tb.mu.Lock()
				tb.errs = append(tb.errs, fmt.Sprintf("answer the %s dialog %q: %v", ev.Type, ev.Message, err))
				tb.mu.Unlock()
			}
			select {
			case tb.dialogs <- ev:
			default:
			}
		}
	}()
	return tb
}

// listen keeps what the page reports as an error. It runs in the tab's
// event loop, so it only records.
func (tb *tab) listen(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		var args []string
		for _, a := range ev.Args {
			args = append(args, remoteText(a))
		}
		msg = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			// speedscope logs why an import failed with console.log.
			tb.mu.Lock()
			tb.console = append(tb.console, msg)
			tb.mu.Unlock()
			return
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, d.Text)
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
	case *log.EventEntryAdded:
		// The browser's own errors, such as a file of the page that failed
		// to load.
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		msg = fmt.Sprintf("browser log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
	default:
		return
	}
	tb.mu.Lock()
	tb.errs = append(tb.errs, msg)
	tb.mu.Unlock()
}

// remoteText is how the console shows a logged value.
func remoteText(o *runtime.RemoteObject) string {
	if o.Description != "" {
		return o.Description
	}
	if len(o.Value) > 0 {
		return strings.Trim(string(o.Value), `"`)
	}
	return string(o.Type)
}

// checkErrors fails the test for each error the page reported so far,
// and for each dialog it opened that the test did not expect (read from
// dialogs): speedscope, for one, alerts when it cannot import a file. It
// reports whether there was none.
func (tb *tab) checkErrors(t *testing.T) bool {
	t.Helper()
	tb.mu.Lock()
	errs := tb.errs
	tb.errs = nil
	tb.mu.Unlock()
	for _, e := range errs {
		t.Errorf("page error: %s", e)
	}
	for {
		select {
		case d := <-tb.dialogs:
			t.Errorf("page opened a %s dialog: %q", d.Type, d.Message)
			errs = append(errs, d.Message)
		default:
			return len(errs) == 0
		}
	}
}

// answerPrompts sets the text the page's prompt dialogs are answered with.
func (tb *tab) answerPrompts(s string) {
	tb.mu.Lock()
	tb.prompt = s
	tb.mu.Unlock()
}

// do runs actions, failing the test with what was being done.
func (tb *tab) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, tb *tab, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitFor polls a JavaScript expression until it is true: what the page
// shows after an action, as a person would wait for it.
func (tb *tab) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(tb.ctx, chromedp.Poll[bool](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		tb.checkErrors(t) // an exception is the likely why
		// What the page shows, for the failure to say what went wrong.
		shows, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](
			`document.title + ': ' + (document.body ? document.body.innerText.slice(0, 300) : '')`))
		t.Fatalf("waiting for %s (%s): %v; the page shows %q", what, expr, err, shows)
	}
}

// point is a position in the viewport, in CSS pixels.
type point struct{ X, Y float64 }

// clickAt clicks the center of the element that the JavaScript
// expression el returns, scrolled into view first, with real mouse events
// as a person's click sends them.
func (tb *tab) clickAt(t *testing.T, what, el string) {
	t.Helper()
	p := eval[point](t, tb, what, `(() => {
		const el = (`+el+`);
		el.scrollIntoView({block: 'nearest', inline: 'nearest'});
		const b = el.getBoundingClientRect();
		return {X: b.left + b.width / 2, Y: b.top + b.height / 2};
	})()`)
	tb.do(t, "click "+what, chromedp.MouseClickXY(p.X, p.Y))
}

// screenshot writes a PNG of the page into the test's directory, or into
// docs/screenshots with -update-screenshots.
func (tb *tab) screenshot(t *testing.T, name string, full bool) {
	t.Helper()
	action := chromedp.CaptureScreenshot()
	if full {
		action = chromedp.FullScreenshot(100) // 100: PNG
	}
	png, err := chromedp.Run(tb.ctx, action)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if *updateScreenshots {
		dir = screenshotDir
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	t.Logf("screenshot: %s (%d bytes)", file, len(png))
}
