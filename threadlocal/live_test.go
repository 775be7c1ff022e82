package threadlocal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testskip"
	"golang.org/x/sys/unix"
)

// procMem reads a live process with process_vm_readv.
type procMem struct{ pid int }

func (m procMem) ReadAt(p []byte, addr uint64) error {
	if len(p) == 0 {
		return nil
	}
	local := []unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
	n, err := unix.ProcessVMReadv(m.pid, local, remote, 0)
	if err != nil {
		return fmt.Errorf("read %d bytes at %#x: %w", len(p), addr, err)
	}
	if n != len(p) {
		return fmt.Errorf("read %d of %d bytes at %#x", n, len(p), addr)
	}
	return nil
}

// probe is one build of testdata/probe.c.
type probe struct {
	lib    string // file name
	symbol string
	flags  []string
	static bool // the dynamic linker must put it in static TLS
	maybe  bool // it may (TLS descriptors served from the static surplus)
}

var probes = []probe{
	{lib: "libprobe.so", symbol: "rubyperf_tls_probe"},
	{lib: "libprobe_desc.so", symbol: "rubyperf_tls_probe_desc", flags: []string{"-mtls-dialect=gnu2"}, maybe: true},
	{lib: "libprobe_ie.so", symbol: "rubyperf_tls_probe_ie", flags: []string{"-DPROBE_INITIAL_EXEC"}, static: true},
}

// builds are the test programs built so far, by compiler.
var (
	buildMu sync.Mutex
	builds  = map[string]*built{}
)

type built struct {
	dir string
	err error
}

// build compiles testdata/host.c and the probes with gcc (glibc), once per
// test binary.
func build(t *testing.T) string { return buildWith(t, "gcc", probes) }

// buildWith compiles them with compiler cc (musl-gcc: against musl), once.
func buildWith(t *testing.T, cc string, ps []probe) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	b := builds[cc]
	if b == nil {
		b = &built{}
		builds[cc] = b
		b.dir, b.err = compile(cc, ps)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.dir
}

func compile(cc string, ps []probe) (string, error) {
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("%s is needed to build the test programs: %w", cc, err)
	}
	dir, err := os.MkdirTemp("", "threadlocal-test-")
	if err != nil {
		return "", err
	}
	var buildErr error
	run := func(args ...string) {
		if buildErr != nil {
			return
		}
		out, err := exec.Command(cc, args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
	}
	run("-Wall", "-Wextra", "-Werror", "-O2", "-pthread", "-o", filepath.Join(dir, "host"), "testdata/host.c", "-ldl")
	for _, p := range ps {
		args := []string{"-Wall", "-Werror", "-O2", "-fPIC", "-shared", "-DPROBE=" + p.symbol}
		args = append(args, p.flags...)
		run(append(args, "-o", filepath.Join(dir, p.lib), "testdata/probe.c")...)
	}
	return dir, buildErr
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range builds {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
	os.Exit(code)
}

// host is a running testdata/host.c.
type host struct {
	pid   int
	stdin io.WriteCloser
	lines chan string
	idle  []int                 // threads that never touch the variables
	sets  map[int][]setterValue // by probe index
}

type setterValue struct {
	tid         int
	addr, value uint64
}

// startHost runs host with the probes and waits until it waits to load them.
func startHost(t *testing.T, dir string) *host { return startHostOf(t, dir, probes) }

// startHostOf runs host with probes ps.
func startHostOf(t *testing.T, dir string, ps []probe) *host {
	t.Helper()
	var args []string
	for _, p := range ps {
		args = append(args, filepath.Join(dir, p.lib))
	}
	cmd := exec.Command(filepath.Join(dir, "host"), args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	h := &host{pid: cmd.Process.Pid, stdin: stdin, lines: make(chan string, 64), sets: map[int][]setterValue{}}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	h.until(t, "waiting")
	return h
}

// until reads the host's lines up to want.
func (h *host) until(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("host exited before printing %q", want)
			}
			if line == want {
				return
			}
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "idle":
				tid, err := strconv.Atoi(f[1])
				if err != nil {
					t.Fatalf("host: %q", line)
				}
				h.idle = append(h.idle, tid)
			case len(f) == 5 && f[0] == "set":
				lib, err1 := strconv.Atoi(f[1])
				tid, err2 := strconv.Atoi(f[2])
				addr, err3 := strconv.ParseUint(strings.TrimPrefix(f[3], "0x"), 16, 64)
				value, err4 := strconv.ParseUint(strings.TrimPrefix(f[4], "0x"), 16, 64)
				if err := errors.Join(err1, err2, err3, err4); err != nil {
					t.Fatalf("host: %q: %v", line, err)
				}
				h.sets[lib] = append(h.sets[lib], setterValue{tid, addr, value})
			case len(f) == 2 && f[0] == "pid":
			default:
				t.Fatalf("host: unexpected line %q", line)
			}
		case <-timeout:
			t.Fatalf("host did not print %q in time", want)
		}
	}
}

// load has the host dlopen the probes and set their variables.
func (h *host) load(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(h.stdin, "load\n"); err != nil {
		t.Fatal(err)
	}
	h.until(t, "ready")
}

// threadPointer reads a thread's fs_base (x86_64) with ptrace, skipping the
// test without the privilege.
func threadPointer(t *testing.T, pid, tid int) uint64 {
	t.Helper()
	tp, err := ptraceThreadPointer(tid)
	if err != nil {
		testskip.Privileged(t, fmt.Errorf("pid %d thread %d: %w", pid, tid, err))
	}
	return tp
}

// ptraceThreadPointer stops thread tid for a moment and reads its fs_base.
func ptraceThreadPointer(tid int) (uint64, error) {
	runtime.LockOSThread() // ptrace requests must come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		return 0, err
	}
	defer unix.PtraceDetach(tid)
	if err := unix.PtraceInterrupt(tid); err != nil {
		return 0, err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		return 0, err
	}
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		return 0, err
	}
	return regs.Fs_base, nil
}

func TestFindDlopened(t *testing.T) {
	h := startHost(t, build(t))
	mem := procMem{h.pid}
	threadPointer(t, h.pid, h.pid) // ptrace needed: skip early without it

	for _, p := range probes {
		if _, err := Find(h.pid, mem, p.symbol); !errors.Is(err, ErrNotLoaded) {
			t.Fatalf("%s before dlopen: %v, want ErrNotLoaded", p.symbol, err)
		}
	}
	h.load(t)
	if len(h.idle) != 3 {
		t.Fatalf("host named %d idle threads, want 3", len(h.idle))
	}

	for i, p := range probes {
		t.Run(p.symbol, func(t *testing.T) {
			v, err := Find(h.pid, mem, p.symbol)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", *v)
			if filepath.Base(v.Object) != p.lib {
				t.Errorf("Object %s, want .../%s", v.Object, p.lib)
			}
			if v.Static != p.static && !p.maybe {
				t.Errorf("Static %v, want %v", v.Static, p.static)
			}
			h.checkSetters(t, mem, v, i, p)
			var stale, unallocated int
			for _, tid := range h.idle {
				tp := threadPointer(t, h.pid, tid)
				if !v.Static {
					stale, unallocated = countWhy(t, mem, v, tp, stale, unallocated)
				}
				addr, ok, err := v.Address(mem, tp)
				if err != nil {
					t.Errorf("idle thread %d: %v", tid, err)
					continue
				}
				if !v.Static {
					if ok {
						t.Errorf("idle thread %d never touched %s, but Address = %#x", tid, p.symbol, addr)
					}
					continue
				}
				// Static TLS: every thread has the block, still zero (.tbss).
				if !ok {
					t.Errorf("idle thread %d: no address for static TLS", tid)
					continue
				}
				if got, err := word(mem, addr); err != nil || got != 0 {
					t.Errorf("idle thread %d: %#x holds %#x (%v), want 0", tid, addr, got, err)
				}
			}
			// The thread started before the dlopen has an older DTV; the
			// one started after has a current DTV with the slot unallocated.
			if !v.Static && (stale == 0 || unallocated == 0) {
				t.Errorf("idle threads: %d with a stale DTV, %d with the slot unallocated; want both", stale, unallocated)
			}
		})
	}
}

// checkSetters: the two setter threads' variable of probe i is where
// v.Address says, and holds what each set.
func (h *host) checkSetters(t *testing.T, mem Memory, v *Var, i int, p probe) {
	t.Helper()
	sets := h.sets[i]
	if len(sets) != 2 || sets[0].addr == sets[1].addr {
		t.Fatalf("host printed %+v for %s", sets, p.lib)
	}
	for _, s := range sets {
		tp := threadPointer(t, h.pid, s.tid)
		addr, ok, err := v.Address(mem, tp)
		if err != nil || !ok || addr != s.addr {
			t.Errorf("%s thread %d (tp %#x): Address = %#x, %v, %v; host printed %#x", p.symbol, s.tid, tp, addr, ok, err, s.addr)
			continue
		}
		if got, err := word(mem, addr); err != nil || got != s.value {
			t.Errorf("%s thread %d: %#x holds %#x (%v), host set %#x", p.symbol, s.tid, addr, got, err, s.value)
		}
	}
}

// countWhy counts why a thread has no block: its DTV predates the module, or
// its slot is TLS_DTV_UNALLOCATED.
func countWhy(t *testing.T, mem Memory, v *Var, tp uint64, stale, unallocated int) (int, int) {
	t.Helper()
	dtv, err1 := word(mem, tp+uint64(v.DTVPointer))
	gen, err2 := word(mem, dtv+uint64(v.DTVCounter))
	slot, err3 := word(mem, dtv+v.ModID*uint64(v.DTVEntrySize)+uint64(v.DTVVal))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	t.Logf("tp %#x: dtv %#x generation %d (module's %d), slot %#x", tp, dtv, gen, v.Generation, slot)
	switch {
	case gen < v.Generation:
		stale++
	case slot == TLSDTVUnallocated:
		unallocated++
	}
	return stale, unallocated
}

// TestFindElsewhere: processes that load no such object.
func TestFindElsewhere(t *testing.T) {
	// The test binary itself (pure Go, it may map no libc at all).
	_, err := Find(os.Getpid(), procMem{os.Getpid()}, "rubyperf_tls_probe")
	if !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Find in the test process: %v, want ErrNotLoaded", err)
	}
	h := startHost(t, build(t))
	mem := procMem{h.pid}
	if _, err := Find(h.pid, mem, "rubyperf_no_such_symbol"); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Find of a missing symbol: %v, want ErrNotLoaded", err)
	}
	_, err = Find(h.pid, mem, "malloc")
	if err == nil || errors.Is(err, ErrNotLoaded) || !strings.Contains(err.Error(), "not as a thread-local") {
		t.Fatalf("Find of a function: %v, want a not-thread-local error", err)
	}
}

// TestLayout logs the descriptors of this machine's glibc and checks they
// hang together.
func TestLayout(t *testing.T) {
	h := startHost(t, build(t))
	mem := procMem{h.pid}
	maps, err := readMaps(h.pid)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := loadObjects(h.pid, maps, "-", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if _, ok := o.sym("_thread_db_pthread_dtvp"); !ok {
			continue
		}
		l, err := readLayout(mem, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", o.path, *l)
		if l.dtvEntry < 16 || l.dtvVal+8 > l.dtvEntry || l.dtvCounter+8 > l.dtvEntry {
			t.Errorf("dtv_t of %d bytes with val at %d, counter at %d", l.dtvEntry, l.dtvVal, l.dtvCounter)
		}
		return
	}
	t.Fatal("the host maps no object exporting _thread_db_pthread_dtvp")
}
