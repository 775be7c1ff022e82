package debuginfo

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults, as elfutils' debuginfod client has them where it has one.
const (
	// DefaultTimeout is DEBUGINFOD_TIMEOUT's default: a server that does not
	// deliver 100 KiB within this long is given up.
	DefaultTimeout = 90 * time.Second
	// DefaultMaxSize bounds a download when DEBUGINFOD_MAXSIZE is not set.
	DefaultMaxSize = 1 << 30
	// defaultCacheMiss is how long an empty (negative) cache entry stands,
	// unless the cache's cache_miss_s file says otherwise.
	defaultCacheMiss = 600 * time.Second
	// progressBytes is the least a server must send per Timeout (elfutils
	// sets curl's low-speed limit to 100 KiB per DEBUGINFOD_TIMEOUT).
	progressBytes = 100 << 10
	maxURLs       = 64
)

// Finder finds debug files. A nil *Finder looks on the local filesystem
// only. One Finder serves one run of a command: it remembers each build-id's
// debuginfod outcome and each server that failed, so a server that is down
// costs its timeout once.
type Finder struct {
	// URLs are debuginfod servers (DEBUGINFOD_URLS), asked in parallel.
	URLs []string
	// CacheDir is the debuginfod client cache (elfutils' layout).
	CacheDir string
	// Timeout: a server that has not sent 100 KiB within each Timeout,
	// counting from the request, is given up (elfutils' DEBUGINFOD_TIMEOUT).
	// Zero or less: no such limit.
	Timeout time.Duration
	// MaxTime bounds one lookup from start to end (DEBUGINFOD_MAXTIME); zero
	// or less: none.
	MaxTime time.Duration
	// MaxSize bounds a download (DEBUGINFOD_MAXSIZE); zero: DefaultMaxSize.
	MaxSize int64
	// Files are debug files given by the user (--debug-file), each used for
	// the file whose build-id it has.
	Files []string
	// Report, if set, receives one line for each lookup that asked a
	// debuginfod server and came back without a file.
	Report func(msg string)

	client     *http.Client
	clientOnce sync.Once

	mu      sync.Mutex
	lookups map[string]*lookup // by build-id
	down    map[string]string  // server -> why it was given up for this run
	files   map[string]string  // build-id -> one of Files
	scanned bool
}

type lookup struct {
	done chan struct{}
	path string
}

// Request describes the ELF file whose debug information is wanted.
type Request struct {
	// ID identifies the file (ReadIdentity).
	ID Identity
	// Name is the file's absolute path inside Root: where .gnu_debuglink
	// candidates are looked for, and how messages name it.
	Name string
	// Root is the filesystem the file lives in: "/" (the default), or
	// /proc/PID/root for a process in a container.
	Root string
	// Explicit is a debug file named for this file alone: it is used
	// whatever else exists, and a build-id that differs is an error.
	Explicit string
	// NoRemote skips debuginfod (e.g. the file has DWARF of its own).
	NoRemote bool
}

func (r Request) root() string {
	if r.Root == "" {
		return "/"
	}
	return r.Root
}

func (r Request) name() string { return r.Name }

// Find returns the path of the debug file for the file req describes, or ""
// when there is none. The error is only for an explicit file that cannot be
// used; a lookup that finds nothing is not an error (a debuginfod failure
// is told to Report).
func (f *Finder) Find(req Request) (string, error) {
	if req.Explicit != "" {
		id, err := explicitBuildID(req.Explicit)
		if err != nil {
			return "", fmt.Errorf("debug file: %w", err)
		}
		if id != "" && req.ID.BuildID != "" && id != req.ID.BuildID {
			return "", fmt.Errorf("debug file %s has build-id %s, but %s has %s", req.Explicit, id, req.name(), req.ID.BuildID)
		}
		return req.Explicit, nil
	}
	if p := f.fromFiles(req.ID.BuildID); p != "" {
		return p, nil
	}
	if p := findLocal(req); p != "" {
		return p, nil
	}
	if f == nil || req.NoRemote || len(f.URLs) == 0 || !ValidBuildID(req.ID.BuildID) {
		return "", nil
	}
	return f.remote(req), nil
}

// fromFiles returns the one of f.Files with build-id id.
func (f *Finder) fromFiles(id string) string {
	if f == nil || len(f.Files) == 0 || id == "" {
		return ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.scanned {
		f.scanned = true
		f.files = map[string]string{}
		for _, p := range f.Files {
			if bid, err := explicitBuildID(p); err == nil && bid != "" {
				if _, dup := f.files[bid]; !dup {
					f.files[bid] = p
				}
			} else {
				f.report(fmt.Sprintf("debug file %s: no build-id to match it by (%v)", p, errOr(err, "none in the file")))
			}
		}
	}
	return f.files[id]
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

func (f *Finder) report(msg string) {
	if f.Report != nil {
		f.Report(msg)
	}
}

// FromEnv makes a Finder configured as elfutils' client is, from
// DEBUGINFOD_URLS, DEBUGINFOD_CACHE_PATH (or XDG_CACHE_HOME, or HOME),
// DEBUGINFOD_TIMEOUT, DEBUGINFOD_MAXTIME and DEBUGINFOD_MAXSIZE. report
// receives one line per missed lookup (nil: none).
func FromEnv(report func(string)) *Finder {
	return fromEnv(os.Getenv, report)
}

func fromEnv(getenv func(string) string, report func(string)) *Finder {
	f := &Finder{Report: report, Timeout: DefaultTimeout, CacheDir: cacheDir(getenv)}
	var bad []string
	f.URLs, bad = ParseURLs(getenv("DEBUGINFOD_URLS"))
	for _, u := range bad {
		f.report(fmt.Sprintf("DEBUGINFOD_URLS: %q ignored: only http:// and https:// servers are asked", u))
	}
	if v := strings.TrimSpace(getenv("DEBUGINFOD_TIMEOUT")); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			f.Timeout = time.Duration(n) * time.Second
		}
	}
	if v := strings.TrimSpace(getenv("DEBUGINFOD_MAXTIME")); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			f.MaxTime = time.Duration(n) * time.Second
		}
	}
	if v := strings.TrimSpace(getenv("DEBUGINFOD_MAXSIZE")); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			f.MaxSize = n
		}
	}
	return f
}

// ParseURLs splits DEBUGINFOD_URLS (space-separated) into server URLs
// without a trailing slash, dropping duplicates; bad lists what is not an
// http:// or https:// URL with a host.
func ParseURLs(s string) (urls, bad []string) {
	seen := map[string]bool{}
	for _, u := range strings.Fields(s) {
		if len(urls) >= maxURLs {
			bad = append(bad, u)
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
			bad = append(bad, u)
			continue
		}
		u = strings.TrimRight(u, "/")
		if !seen[u] {
			seen[u] = true
			urls = append(urls, u)
		}
	}
	return urls, bad
}

// cacheDir is elfutils' choice of client cache: $DEBUGINFOD_CACHE_PATH;
// else ~/.debuginfod_client_cache if it exists (the old default); else
// $XDG_CACHE_HOME/debuginfod_client; else ~/.cache/debuginfod_client.
func cacheDir(getenv func(string) string) string {
	if p := getenv("DEBUGINFOD_CACHE_PATH"); p != "" {
		return p
	}
	home := getenv("HOME")
	if home == "" {
		home = "/"
	}
	old := filepath.Join(home, ".debuginfod_client_cache")
	if st, err := os.Stat(old); err == nil && st.IsDir() {
		return old
	}
	if x := getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "debuginfod_client")
	}
	return filepath.Join(home, ".cache", "debuginfod_client")
}
