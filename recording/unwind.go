package recording

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/procmaps"
)

// unwindTables gives the program each target's unwind tables
// (Options.NativeTables): every executable file a target maps has its call
// frame information compiled once per file (shared by the targets that map
// it) and its rows loaded once; a target's list of mappings with rows is
// made as it is added, the files compiled while it was attached
// (prepare), and again after it maps more code (a C extension required)
// or forks. The work runs in its own goroutine, never under the
// session's lock and never before a target is sampled: neither naming
// samples nor following a fork may wait for a compile (about 10 ms for a
// libruby, more to read its call frame information).
type unwindTables struct {
	sampler *bpf.Sampler
	spaces  *mountSpaces // the files of each target's mount namespace (load's alone)
	warn    func(key, msg string)

	loading sync.Mutex // held by load: objs and the sampler's rows are one caller's at a time

	mu       sync.Mutex
	pending  map[int]bool // pids whose list is to be made (again)
	released uint64       // the heap allocated when memory was last given back (releaseMemory)
	// releasedAt is when that was, loadedAt how many files were loaded
	// then; releasing is the release due, if one waits for releaseEvery.
	releasedAt time.Time
	loadedAt   int
	releasing  *time.Timer
	wake       chan struct{}
	warned     map[string]bool // problems told once (s.mu)
}

func newUnwindTables(s *session) *unwindTables {
	// Its objects serve for their tables alone, each let go once its rows
	// are in the program: names come from readers' own objects.
	host := &native.Objects{Load: native.LoadOptions{TableOnly: true}}
	u := &unwindTables{spaces: newMountSpaces(host, s.opts.Debuginfo, nil),
		pending: map[int]bool{}, wake: make(chan struct{}, 1), warned: map[string]bool{}}
	u.warn = func(key, msg string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if u.warned[key] || s.opts.Warn == nil {
			return
		}
		u.warned[key] = true
		fmt.Fprintln(s.opts.Warn, msg)
	}
	return u
}

// request asks for pid's list to be made (again), soon.
func (u *unwindTables) request(pid int) {
	if u == nil {
		return
	}
	u.mu.Lock()
	u.pending[pid] = true
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// run makes the lists asked for until ctx ends.
func (u *unwindTables) run(ctx context.Context) {
	if runtime.GOARCH != "amd64" {
		u.warn("arch", fmt.Sprintf("rubyperf: native unwinding in the program is not built for %s: the stack copy serves", runtime.GOARCH))
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.wake:
		}
		u.mu.Lock()
		pids := u.pending
		u.pending = map[int]bool{}
		u.mu.Unlock()
		for pid := range pids {
			if ctx.Err() != nil {
				return
			}
			u.load(pid)
		}
		u.releaseMemory()
	}
}

// prepare compiles, in the background, the tables of the files pid maps,
// while it is attached: attaching takes longer than most compiles, so that
// the list made after attach (load) finds them ready and the target's first
// samples have their native frames. A process that is just starting maps
// its libraries as it goes: the maps are read again, a few ms after a read
// that found a new file and less often after one that found none, until the
// returned stop is called (or a few seconds have passed). Each read wakes
// the recorder: at a fixed 5 ms, 200 times a second while a target was
// attached.
func (u *unwindTables) prepare(pid int) (stop func()) {
	if u == nil || runtime.GOARCH != "amd64" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		timer := time.NewTimer(prepareMaxWait) // (reset before each wait)
		defer timer.Stop()
		seen := map[string]bool{}
		wait := prepareMinWait
		for end := time.Now().Add(prepareFor); time.Now().Before(end); {
			if u.compileMapped(pid, seen) {
				wait = prepareMinWait
			} else {
				wait = min(2*wait, prepareMaxWait)
			}
			timer.Reset(wait)
			select {
			case <-done:
				return
			case <-timer.C:
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}

// How often prepare reads a process's maps: prepareMinWait after a read
// that found a file to compile, up to prepareMaxWait after reads that
// found none; for at most prepareFor.
const (
	prepareMinWait = 5 * time.Millisecond
	prepareMaxWait = 40 * time.Millisecond
	prepareFor     = 3 * time.Second
)

// compileMapped compiles the tables of the files pid maps now, but those in
// seen (nil: none), which it adds to; it says whether there was one.
func (u *unwindTables) compileMapped(pid int, seen map[string]bool) (found bool) {
	for _, m := range execMappings(pid) {
		if m.Path == "" || m.Path[0] != '/' || seen[m.Path] {
			continue
		}
		found = true
		if seen != nil {
			seen[m.Path] = true
		}
		u.loading.Lock()
		objs := u.spaces.objectsOf(uint32(pid))
		u.spaces.forget(uint32(pid))
		o := objs.Get(m.Path)
		o.Table(native.ArchX86_64)
		u.loading.Unlock()
		if o.ThinCFI() {
			u.warn("thin:"+m.Path, fmt.Sprintf("rubyperf: pid %d: %s has call frame information for little of its code, "+
				"so native stacks stop in it: install its debug file (Alpine: musl-dbg; Debian: its -dbgsym package) "+
				"or set DEBUGINFOD_URLS", pid, m.Path))
		}
	}
	return found
}

// maxPrepareWait bounds how long a target's first sample waits for its
// tables (awaitTables): the longer, the later a fork it makes meanwhile is
// followed.
const maxPrepareWait = 50 * time.Millisecond

// awaitTables makes pid's list of mappings with rows before it is sampled,
// compiling what prepare has not, so that its first samples have their
// native frames; it waits at most maxPrepareWait, and a list not made by
// then is made as soon as it can be.
func (u *unwindTables) awaitTables(pid int) {
	if u == nil || runtime.GOARCH != "amd64" {
		return
	}
	done := make(chan struct{})
	go func() {
		u.compileMapped(pid, nil)
		u.load(pid)
		close(done)
		u.releaseMemory() // (once pid is sampled)
	}()
	select {
	case <-done:
	case <-time.After(maxPrepareWait):
	}
}

// releaseAfter is how much the recorder allocates before releaseMemory
// gives the heap's free memory back again; releaseEvery, how often it may.
const (
	releaseAfter = 4 << 20
	releaseEvery = 30 * time.Second
)

// releaseMemory gives the heap's free memory back to the system once the
// recorder has loaded another file's call frame information and allocated
// releaseAfter since it last did, at most every releaseEvery (a release due
// sooner waits until then). Compiling tables grows the heap (a libruby's
// table, let go once its rows are loaded, takes 3.5 MB to compile), and a
// recorder that allocates next to nothing once its targets are attached
// runs no collection that would shrink it: 12 MB more stayed resident for
// as long as the recording ran. But a release is a whole collection, and
// the pages given back fault in again: an agent attaching to a new Ruby
// every second or two, each mapping the files the others did, spent 0.9%
// of a core releasing after each (2.8% against 1.9%).
func (u *unwindTables) releaseMemory() {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	allocated := s[0].Value.Uint64()
	u.loading.Lock()
	loaded := u.spaces.loaded()
	u.loading.Unlock()
	u.mu.Lock()
	defer u.mu.Unlock()
	if loaded == u.loadedAt || allocated-u.released < releaseAfter || u.releasing != nil {
		return
	}
	u.releasing = time.AfterFunc(max(time.Until(u.releasedAt.Add(releaseEvery)), 0), func() {
		u.mu.Lock()
		u.released, u.releasedAt, u.loadedAt, u.releasing = allocated, time.Now(), loaded, nil
		u.mu.Unlock()
		debug.FreeOSMemory()
	})
}

// execMappings are pid's executable mappings (none when it is gone).
func execMappings(pid int) []native.Mapping {
	pm, err := procmaps.Read(pid)
	if err != nil {
		return nil
	}
	list := make([]native.Mapping, 0, len(pm))
	for _, m := range pm {
		if len(m.Perms) > 2 && m.Perms[2] == 'x' {
			list = append(list, native.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, Path: m.Path, Exec: true})
		}
	}
	return list
}

// load makes pid's list of mappings with rows. A target the tables cannot
// serve is still sampled: its samples go without native frames from the
// program (the stack copy, if any, serves).
func (u *unwindTables) load(pid int) {
	list := execMappings(pid)
	if list == nil {
		return // gone: its exit ends it
	}
	u.loading.Lock()
	defer u.loading.Unlock()
	objs := u.spaces.objectsOf(uint32(pid))
	u.spaces.forget(uint32(pid)) // (a pid may be another process later)
	n, err := u.sampler.UnwindMappings(pid, list, objs)
	if err != nil {
		key := err.Error()
		if errors.Is(err, bpf.ErrNoRowRoom) {
			key = "budget"
		}
		u.warn(key, fmt.Sprintf("rubyperf: pid %d: %d mappings unwound in the program; %v", pid, n, err))
	}
}
