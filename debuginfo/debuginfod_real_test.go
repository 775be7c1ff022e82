package debuginfo

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
)

// TestRealDebuginfod fetches a debug file from elfutils' own debuginfod,
// into elfutils' cache layout, and then from the cache alone.
func TestRealDebuginfod(t *testing.T) {
	dir := t.TempDir()
	lib := debuginfodtest.CLib(t, dir)
	served := filepath.Join(dir, "served")
	sp := debuginfodtest.SplitDebug(t, lib, filepath.Join(dir, "stripped", "libfake.so.1"), filepath.Join(served, "libfake.so.1.debug"))
	srv := debuginfodtest.Serve(t, served)
	srv.WaitFor(t, sp.BuildID, 30*time.Second)

	cache := filepath.Join(t.TempDir(), "cache")
	var lines []string
	var mu sync.Mutex
	f := fromEnv(env(map[string]string{"DEBUGINFOD_URLS": srv.URL, "DEBUGINFOD_CACHE_PATH": cache, "DEBUGINFOD_TIMEOUT": "5"}),
		func(s string) { mu.Lock(); lines = append(lines, s); mu.Unlock() })
	req := Request{ID: identityOf(t, sp.Stripped), Name: "/usr/lib/libfake.so.1", Root: t.TempDir()}
	start := time.Now()
	p, err := f.Find(req)
	took := time.Since(start)
	if err != nil || p != CachePath(cache, sp.BuildID) {
		t.Fatalf("Find = %q, %v; want %s\nreports: %q\n%s", p, err, CachePath(cache, sp.BuildID), lines, srv.Log())
	}
	t.Logf("download from debuginfod took %s", took)
	want, _ := os.ReadFile(sp.Debug)
	got, _ := os.ReadFile(p)
	if len(want) == 0 || string(got) != string(want) {
		t.Errorf("cached file (%d bytes) differs from the served one (%d bytes)", len(got), len(want))
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o400 {
		t.Errorf("cache file mode %v (%v), want 0400 as elfutils makes it", st.Mode(), err)
	}
	if len(lines) != 0 {
		t.Errorf("a successful lookup reported %q", lines)
	}

	// A new run, the server gone: the cache alone answers.
	f2 := fromEnv(env(map[string]string{"DEBUGINFOD_URLS": debuginfodtest.Refusing(t), "DEBUGINFOD_CACHE_PATH": cache}), nil)
	if p2, _ := f2.Find(req); p2 != p {
		t.Errorf("from the cache: %q, want %q", p2, p)
	}
	// A build-id the server does not have: elfutils' negative cache entry.
	other := req
	other.ID.BuildID = strings.Repeat("ab", 20)
	other.ID.Link = ""
	if p3, _ := f.Find(other); p3 != "" {
		t.Errorf("unknown build-id found: %q", p3)
	}
	if st, err := os.Stat(CachePath(cache, other.ID.BuildID)); err != nil || st.Size() != 0 {
		t.Errorf("no empty negative-cache file for a 404: %v", err)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "debuginfod "+srv.URL+": not found (HTTP 404") {
		t.Errorf("reports %q, want one 404 line", lines)
	}
}
