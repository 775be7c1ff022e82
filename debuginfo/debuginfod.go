package debuginfo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// CachePath is where elfutils' client cache keeps the debug file of a
// build-id: CACHE/BUILDID/debuginfo.
func CachePath(cache, buildID string) string {
	return filepath.Join(cache, buildID, "debuginfo")
}

// errNotFound is a server's answer that it has no such file (any HTTP error
// but 406): the kind of miss elfutils records in its negative cache.
var errNotFound = errors.New("not found")

// errTooBig is a file over MaxSize (or the server's 406 for our
// X-DEBUGINFOD-MAXSIZE).
var errTooBig = errors.New("file too big")

// errNoProgress ends a request that sent under 100 KiB in a Timeout.
var errNoProgress = errors.New("no progress")

// remote asks the debuginfod cache, then the servers, once per build-id
// per Finder: concurrent and later asks for the same build-id wait for and
// share the first one's outcome.
func (f *Finder) remote(req Request) string {
	id := req.ID.BuildID
	f.mu.Lock()
	if f.lookups == nil {
		f.lookups = map[string]*lookup{}
	}
	if l, ok := f.lookups[id]; ok {
		f.mu.Unlock()
		<-l.done
		return l.path
	}
	l := &lookup{done: make(chan struct{})}
	f.lookups[id] = l
	f.mu.Unlock()
	defer close(l.done)
	path, err := f.fetch(id)
	if err != nil {
		name := req.name()
		if name == "" {
			name = "file"
		}
		f.report(fmt.Sprintf("no debug info for %s (build-id %s): %v", name, id, err))
	}
	l.path = path
	return path
}

// fetch returns the cached or downloaded debug file of id. A nil error with
// no path is a negative-cache hit: the servers said no within cache_miss_s.
func (f *Finder) fetch(id string) (string, error) {
	if f.CacheDir == "" {
		return "", errors.New("debuginfod: no cache directory (set DEBUGINFOD_CACHE_PATH or HOME)")
	}
	target := CachePath(f.CacheDir, id)
	if p, done, err := f.cached(target, id); done {
		return p, err
	}
	var servers []string
	var skipped []string
	f.mu.Lock()
	for _, u := range f.URLs {
		if why, down := f.down[u]; down {
			skipped = append(skipped, fmt.Sprintf("debuginfod %s: %s earlier in this run", u, why))
			continue
		}
		servers = append(servers, u)
	}
	f.mu.Unlock()
	if len(servers) == 0 {
		return "", errors.New(strings.Join(skipped, "; "))
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	ctx := context.Background()
	if f.MaxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.MaxTime)
		defer cancel()
	}
	path, errs := f.download(ctx, servers, id, target)
	if path != "" {
		return path, nil
	}
	allNotFound := len(skipped) == 0 // a server that was not asked may have it
	var msgs []string
	for i, err := range errs {
		if !errors.Is(err, errNotFound) {
			allNotFound = false
		}
		if transportFailure(err) {
			f.mu.Lock()
			if f.down == nil {
				f.down = map[string]string{}
			}
			f.down[servers[i]] = f.describe(err)
			f.mu.Unlock()
		}
		msgs = append(msgs, fmt.Sprintf("debuginfod %s: %s", servers[i], f.describe(err)))
	}
	if allNotFound {
		// elfutils' negative cache: an empty file, good for cache_miss_s.
		if nf, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			nf.Close()
		}
		os.Remove(filepath.Dir(target)) // only if empty
	}
	return "", errors.New(strings.Join(append(msgs, skipped...), "; "))
}

// cached looks in the cache: a non-empty file with the right build-id is a
// hit; an empty one younger than cache_miss_s is a negative hit (done, no
// path, no error); an older empty one is removed and the servers asked.
func (f *Finder) cached(target, id string) (path string, done bool, err error) {
	fd, st, err := safefile.OpenStat(target)
	if err != nil {
		return "", false, nil
	}
	defer fd.Close()
	if st.Size() > 0 {
		if got := fileBuildID(fd); got != id {
			f.report(fmt.Sprintf("debuginfod cache: %s has build-id %q, not %s; fetching it again", target, got, id))
			return "", false, nil
		}
		return target, true, nil
	}
	if time.Since(st.ModTime()) <= f.cacheMiss() {
		return "", true, nil
	}
	os.Remove(target)
	return "", false, nil
}

// maxConfigBytes bounds a cache configuration file (a number).
const maxConfigBytes = 64

// cacheMiss reads the cache's cache_miss_s (seconds a negative entry
// stands), writing the default there if the file is missing, as elfutils
// does.
func (f *Finder) cacheMiss() time.Duration {
	p := filepath.Join(f.CacheDir, "cache_miss_s")
	fd, err := safefile.Open(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			os.WriteFile(p, []byte(strconv.Itoa(int(defaultCacheMiss/time.Second))), 0o644)
		}
		return defaultCacheMiss
	}
	defer fd.Close()
	b, _ := io.ReadAll(io.LimitReader(fd, maxConfigBytes))
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 || n > 1<<31 {
		return defaultCacheMiss
	}
	return time.Duration(n) * time.Second
}

// download asks every server at once; the first to answer 200 is read into
// a temporary file in target's directory, checked (an ELF file with build-id
// id, within MaxSize), and renamed to target. errs has each server's
// failure, in order.
func (f *Finder) download(ctx context.Context, servers []string, id, target string) (string, []error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(servers))
	var winner atomic.Int32
	winner.Store(-1)
	var path string
	var wg sync.WaitGroup
	for i, u := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := f.get(ctx, strings.TrimRight(u, "/")+"/buildid/"+id+"/debuginfo", id, target, func() bool {
				return winner.CompareAndSwap(-1, int32(i))
			})
			if err == nil {
				path = p
				cancel() // the others stop
				return
			}
			if winner.Load() >= 0 && winner.Load() != int32(i) && ctx.Err() != nil {
				err = errors.New("another server answered first")
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if path != "" {
		return path, nil
	}
	return "", errs
}

// get fetches one URL. claim is called once the server answers 200: only
// the first server to claim writes the file.
func (f *Finder) get(parent context.Context, u, id, target string, claim func() bool) (string, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var got atomic.Int64
	if f.Timeout > 0 {
		stop := f.watch(ctx, &got, func() { cancel(errNoProgress) })
		defer stop()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "rubyperf-debuginfo/1 ("+runtime.GOOS+"/"+runtime.GOARCH+")")
	max := f.maxSize()
	if f.MaxSize > 0 {
		req.Header.Set("X-DEBUGINFOD-MAXSIZE", strconv.FormatInt(max, 10))
	}
	resp, err := f.httpClient().Do(req)
	if err != nil {
		return "", ctxCause(ctx, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotAcceptable:
		return "", fmt.Errorf("%w (the server's answer to X-DEBUGINFOD-MAXSIZE %d)", errTooBig, max)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%w (HTTP %s)", errNotFound, resp.Status)
	}
	if n := announcedSize(resp); n > max {
		return "", fmt.Errorf("%w: %d bytes, over the %d-byte limit (DEBUGINFOD_MAXSIZE)", errTooBig, n, max)
	}
	if !claim() {
		return "", errors.New("another server answered first")
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), filepath.Base(target)+".*")
	if err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, &countingReader{r: io.LimitReader(resp.Body, max+1), n: &got})
	if err != nil {
		return "", ctxCause(ctx, err)
	}
	if n > max {
		return "", fmt.Errorf("%w: over the %d-byte limit (DEBUGINFOD_MAXSIZE)", errTooBig, max)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if bid := fileBuildID(tmp); bid != id {
		return "", fmt.Errorf("the server sent a file with build-id %q, not the one asked for", bid)
	}
	if mt, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		os.Chtimes(tmp.Name(), mt, mt)
	}
	tmp.Chmod(0o400) // as elfutils: cache files are casually unwritable
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	keep = true
	return target, nil
}

func announcedSize(resp *http.Response) int64 {
	n := resp.ContentLength
	if n < 0 {
		if v, err := strconv.ParseInt(resp.Header.Get("X-Debuginfod-Size"), 10, 64); err == nil {
			n = v
		}
	}
	return n
}

func (f *Finder) maxSize() int64 {
	if f.MaxSize > 0 {
		return f.MaxSize
	}
	return DefaultMaxSize
}

// watch cancels a request that has not received progressBytes within each
// Timeout (the first window includes connecting and waiting for the
// answer). The returned func stops it.
func (f *Finder) watch(ctx context.Context, got *atomic.Int64, giveUp func()) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(f.Timeout)
		defer t.Stop()
		last := int64(0)
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				n := got.Load()
				if n-last < progressBytes {
					giveUp()
					return
				}
				last = n
			}
		}
	}()
	return func() { close(done) }
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// ctxCause returns why ctx ended if it did (the progress watchdog, or
// MaxTime), else err.
func ctxCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return err
}

// transportFailure says the server could not be talked to (refused,
// unreachable, silent): it is not asked again in this run.
func transportFailure(err error) bool {
	if err == nil || errors.Is(err, errNotFound) || errors.Is(err, errTooBig) {
		return false
	}
	if errors.Is(err, errNoProgress) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

// describe says in a few words why a server gave nothing.
func (f *Finder) describe(err error) string {
	switch {
	case errors.Is(err, errNoProgress):
		return fmt.Sprintf("under 100 KiB within %s (DEBUGINFOD_TIMEOUT)", f.Timeout)
	case errors.Is(err, context.DeadlineExceeded) && f.MaxTime > 0:
		return fmt.Sprintf("not done within %s (DEBUGINFOD_MAXTIME)", f.MaxTime)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// httpClient follows redirects only to http and https, and dials with
// the Timeout.
func (f *Finder) httpClient() *http.Client {
	f.clientOnce.Do(func() {
		timeout := max(f.Timeout, 0)
		dial := &net.Dialer{Timeout: timeout}
		f.client = &http.Client{
			Transport: &http.Transport{
				Proxy:               http.ProxyFromEnvironment,
				DialContext:         dial.DialContext,
				TLSHandshakeTimeout: timeout,
				MaxIdleConnsPerHost: 2,
			},
			CheckRedirect: func(r *http.Request, via []*http.Request) error {
				if len(via) >= 8 {
					return errors.New("too many redirects")
				}
				if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
					return fmt.Errorf("redirect to %s refused", r.URL.Scheme)
				}
				return nil
			},
		}
	})
	return f.client
}
