package debuginfo

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
)

// served is a debug file and a test server for it; handler decides each
// answer (nil: serve the file at /buildid/ID/debuginfo, 404 otherwise).
type served struct {
	fx       fixture
	body     []byte
	requests atomic.Int32
	url      string
}

func serve(t *testing.T, fx fixture, handler func(w http.ResponseWriter, r *http.Request, body []byte)) *served {
	t.Helper()
	body, err := os.ReadFile(fx.dbg)
	if err != nil {
		t.Fatal(err)
	}
	s := &served{fx: fx, body: body}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if handler != nil {
			handler(w, r, body)
			return
		}
		if r.URL.Path != "/buildid/"+fx.id+"/debuginfo" {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

type reports struct {
	mu    sync.Mutex
	lines []string
}

func (r *reports) add(s string) { r.mu.Lock(); r.lines = append(r.lines, s); r.mu.Unlock() }
func (r *reports) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// countRequests counts the requests f sends from now on, to any server
// (one that refuses connections too). Call it after setting f.Timeout.
func countRequests(f *Finder) *atomic.Int32 {
	n := &atomic.Int32{}
	c := f.httpClient()
	c.Transport = countingTransport{c.Transport, n}
	return n
}

type countingTransport struct {
	http.RoundTripper
	n *atomic.Int32
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.RoundTripper.RoundTrip(r)
}

func finder(urls []string, cache string, rep *reports) *Finder {
	return &Finder{URLs: urls, CacheDir: cache, Timeout: DefaultTimeout, Report: rep.add}
}

func TestDebuginfodDownload(t *testing.T) {
	fx := newFixture(t)
	s := serve(t, fx, nil)
	cache := filepath.Join(t.TempDir(), "cache")
	rep := &reports{}
	f := finder([]string{s.url + "/"}, cache, rep) // a trailing slash is fine
	p, err := f.Find(fx.req(t))
	if err != nil || p != filepath.Join(cache, fx.id, "debuginfo") {
		t.Fatalf("Find = %q, %v; want %s/%s/debuginfo", p, err, cache, fx.id)
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Errorf("cache dir holds %d entries, want only debuginfo (no temporary files)", len(ents))
	}
	// Once per build-id per run: asking again (also concurrently) sends nothing.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); f.Find(fx.req(t)) }()
	}
	wg.Wait()
	if n := s.requests.Load(); n != 1 {
		t.Errorf("%d requests for one build-id, want 1", n)
	}
	// A local debug file wins over debuginfod; NoRemote skips it.
	req := fx.req(t)
	req.NoRemote = true
	g := finder([]string{s.url}, t.TempDir(), rep)
	if p, _ := g.Find(req); p != "" || s.requests.Load() != 1 {
		t.Errorf("NoRemote asked the server: %q", p)
	}
	if len(rep.get()) != 0 {
		t.Errorf("reports: %q", rep.get())
	}
}

// TestNegativeCache: a 404 from every server leaves an empty file that
// answers for cache_miss_s (elfutils' negative cache); errors other than
// "not found" leave none.
func TestNegativeCache(t *testing.T) {
	fx := newFixture(t)
	s := serve(t, fx, func(w http.ResponseWriter, r *http.Request, _ []byte) { http.NotFound(w, r) })
	cache := filepath.Join(t.TempDir(), "cache")
	rep := &reports{}
	if p, _ := finder([]string{s.url}, cache, rep).Find(fx.req(t)); p != "" {
		t.Fatalf("found %q on a server that has nothing", p)
	}
	neg := filepath.Join(cache, fx.id, "debuginfo")
	if st, err := os.Stat(neg); err != nil || st.Size() != 0 {
		t.Fatalf("negative cache entry: %v", err)
	}
	if lines := rep.get(); len(lines) != 1 || !strings.Contains(lines[0], "not found (HTTP 404") || !strings.Contains(lines[0], fx.id) {
		t.Errorf("reports %q", lines)
	}
	// A new run within cache_miss_s: no request, no report.
	rep2 := &reports{}
	if p, _ := finder([]string{s.url}, cache, rep2).Find(fx.req(t)); p != "" || s.requests.Load() != 1 || len(rep2.get()) != 0 {
		t.Errorf("negative entry not honoured: %q, %d requests, reports %q", p, s.requests.Load(), rep2.get())
	}
	// Reading a negative entry writes the default cache_miss_s, as elfutils does.
	if b, err := os.ReadFile(filepath.Join(cache, "cache_miss_s")); err != nil || string(b) != "600" {
		t.Errorf("cache_miss_s: %q, %v; want elfutils' default 600", b, err)
	}
	// Older than cache_miss_s: asked again.
	os.WriteFile(filepath.Join(cache, "cache_miss_s"), []byte("5\n"), 0o644)
	old := time.Now().Add(-10 * time.Second)
	os.Chtimes(neg, old, old)
	finder([]string{s.url}, cache, rep2).Find(fx.req(t))
	if s.requests.Load() != 2 {
		t.Errorf("an expired negative entry was not retried (%d requests)", s.requests.Load())
	}
	// A server error that is not "not found" (a refused connection) leaves
	// no entry.
	os.Remove(neg)
	cache3 := filepath.Join(t.TempDir(), "cache")
	finder([]string{debuginfodtest.Refusing(t)}, cache3, rep2).Find(fx.req(t))
	if _, err := os.Stat(filepath.Join(cache3, fx.id, "debuginfo")); err == nil {
		t.Error("a refused connection was cached as a miss")
	}
}

// TestServerDown: a refused connection and a server that never answers
// each cost at most the timeout, once per run, and are reported in one line.
func TestServerDown(t *testing.T) {
	fx := newFixture(t)
	for _, c := range []struct {
		name, url, want string
		timeout         time.Duration
	}{
		{"refused", debuginfodtest.Refusing(t), "connection refused", time.Second},
		{"silent", debuginfodtest.Silent(t).URL, "under 100 KiB within 1s (DEBUGINFOD_TIMEOUT)", time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := &reports{}
			f := finder([]string{c.url}, t.TempDir(), rep)
			f.Timeout = c.timeout
			asked := countRequests(f)
			start := time.Now()
			p, err := f.Find(fx.req(t))
			took := time.Since(start)
			t.Logf("%s: %s", c.name, took)
			if p != "" || err != nil {
				t.Errorf("Find = %q, %v", p, err)
			}
			if took > c.timeout+time.Second {
				t.Errorf("took %s, over the %s timeout", took, c.timeout)
			}
			lines := rep.get()
			want := fmt.Sprintf("no debug info for %s (build-id %s): debuginfod %s: %s", fx.name, fx.id, c.url, c.want)
			if len(lines) != 1 || lines[0] != want {
				t.Errorf("reports %q\nwant [%q]", lines, want)
			}
			// Another build-id in the same run: the server is not asked again.
			req := fx.req(t)
			req.ID.BuildID = strings.Repeat("cd", 20)
			f.Find(req)
			if n := asked.Load(); n != 1 {
				t.Errorf("%d requests: a server that failed was asked again", n)
			}
			if lines := rep.get(); len(lines) != 2 || !strings.Contains(lines[1], "earlier in this run") {
				t.Errorf("second report %q", lines)
			}
		})
	}
}

// TestSlowServer: a server that trickles under 100 KiB per timeout is given
// up after the timeout; MaxTime bounds a whole lookup.
func TestSlowServer(t *testing.T) {
	fx := newFixture(t)
	trickle := func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		for i := range body {
			if _, err := w.Write(body[i : i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	s := serve(t, fx, trickle)
	rep := &reports{}
	f := finder([]string{s.url}, t.TempDir(), rep)
	f.Timeout = time.Second
	start := time.Now()
	if p, _ := f.Find(fx.req(t)); p != "" {
		t.Errorf("a trickle finished: %q", p)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("trickle took %s, timeout 1s", took)
	}
	if lines := rep.get(); len(lines) != 1 || !strings.Contains(lines[0], "under 100 KiB within 1s") {
		t.Errorf("reports %q", lines)
	}
	if ents, _ := os.ReadDir(filepath.Join(f.CacheDir, fx.id)); len(ents) != 0 {
		t.Errorf("a failed download left %d files", len(ents))
	}

	g := finder([]string{serve(t, fx, trickle).url}, t.TempDir(), rep)
	g.Timeout, g.MaxTime = 0, 500*time.Millisecond
	start = time.Now()
	g.Find(fx.req(t))
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("MaxTime 0.5s: took %s", took)
	}
	if lines := rep.get(); !strings.Contains(lines[len(lines)-1], "DEBUGINFOD_MAXTIME") {
		t.Errorf("reports %q", lines)
	}
}

// TestParallelServers: a hanging server does not delay a working one.
func TestParallelServers(t *testing.T) {
	fx := newFixture(t)
	good := serve(t, fx, nil)
	rep := &reports{}
	f := finder([]string{debuginfodtest.Silent(t).URL, good.url}, t.TempDir(), rep)
	f.Timeout = 5 * time.Second
	start := time.Now()
	if p, _ := f.Find(fx.req(t)); p == "" {
		t.Fatalf("not found; reports %q", rep.get())
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s: the silent server held up the good one", took)
	}
}

// TestBoundedDownload: files over MaxSize are refused, announced or not;
// a file of another build-id is refused; nothing is left in the cache.
func TestBoundedDownload(t *testing.T) {
	fx := newFixture(t)
	for _, c := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request, body []byte)
		want    string
	}{
		{"content-length", nil, "file too big: "},
		{"chunked", func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Write(body[:1]) // no Content-Length: chunked
			w.(http.Flusher).Flush()
			w.Write(body[1:])
		}, "file too big: over the"},
		{"406", func(w http.ResponseWriter, r *http.Request, body []byte) {
			if r.Header.Get("X-DEBUGINFOD-MAXSIZE") == "" {
				t.Error("no X-DEBUGINFOD-MAXSIZE header")
			}
			w.WriteHeader(http.StatusNotAcceptable)
		}, "file too big (the server's answer"},
		{"wrong-build", func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Write([]byte("\x7fELF not really"))
		}, "the server sent a file with build-id \"\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := serve(t, fx, c.handler)
			rep := &reports{}
			f := finder([]string{s.url}, t.TempDir(), rep)
			if c.name != "wrong-build" {
				f.MaxSize = int64(len(s.body) - 1)
			}
			if p, _ := f.Find(fx.req(t)); p != "" {
				t.Errorf("accepted: %q", p)
			}
			if lines := rep.get(); len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("reports %q, want %q", lines, c.want)
			}
			if ents, _ := os.ReadDir(filepath.Join(f.CacheDir, fx.id)); len(ents) != 0 {
				t.Errorf("left %d files in the cache", len(ents))
			}
		})
	}
	// MaxSize exactly the file's size is fine.
	s := serve(t, fx, nil)
	f := finder([]string{s.url}, t.TempDir(), &reports{})
	f.MaxSize = int64(len(s.body))
	if p, _ := f.Find(fx.req(t)); p == "" {
		t.Error("a file of exactly MaxSize was refused")
	}
}

// TestCorruptCache: a cache entry of another build-id is fetched again.
func TestCorruptCache(t *testing.T) {
	fx := newFixture(t)
	s := serve(t, fx, nil)
	cache := t.TempDir()
	os.MkdirAll(filepath.Join(cache, fx.id), 0o700)
	os.WriteFile(filepath.Join(cache, fx.id, "debuginfo"), []byte("junk"), 0o644)
	rep := &reports{}
	p, _ := finder([]string{s.url}, cache, rep).Find(fx.req(t))
	if p == "" || s.requests.Load() != 1 {
		t.Errorf("corrupt cache entry: %q, %d requests", p, s.requests.Load())
	}
	if got, _ := BuildIDOf(p); got != fx.id {
		t.Errorf("cache now has build-id %q", got)
	}
}
