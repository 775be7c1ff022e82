// Package debuginfodtest gives tests real separate debug files and a real
// debuginfod (elfutils') serving them: a small C library built with DWARF,
// split as distributions split theirs, and a server reachable only on
// 127.0.0.1.
//
// The server runs in a network namespace of its own (debuginfod listens on
// every address and has no flag to choose one); the test reaches it through
// a forwarder listening on 127.0.0.1. That needs root; without it, or
// without debuginfod, the test skips under internal/testskip's rule.
package debuginfodtest

import (
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// CSource is the library CLib builds: a Ruby-looking version string, an
// exported function, and a static one that only .symtab (not .dynsym)
// names.
const CSource = `
const char ruby_version[] = "3.1.2";

static int __attribute__((noinline)) rubyperf_static_work(int x) {
	volatile int y = x;
	for (int i = 0; i < 100; i++)
		y += i * x;
	return y;
}

int rubyperf_exported_entry(int x) { return rubyperf_static_work(x) + 1; }
`

// StaticFunc and ExportedFunc are the functions of CSource.
const (
	StaticFunc   = "rubyperf_static_work"
	ExportedFunc = "rubyperf_exported_entry"
)

// CLib compiles CSource into a shared library with DWARF, in dir, and
// returns its path.
func CLib(t testing.TB, dir string) string {
	t.Helper()
	return CLibWith(t, dir, "")
}

// CLibWith is CLib with more source compiled after CSource and more gcc
// flags.
func CLibWith(t testing.TB, dir, moreSource string, flags ...string) string {
	t.Helper()
	gcc := testskip.Command(t, "gcc", "gcc")
	src := filepath.Join(dir, "fake.c")
	if err := os.WriteFile(src, []byte(CSource+moreSource), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libfake.so.1")
	args := append([]string{"-g", "-O1", "-shared", "-fPIC", "-Wl,--build-id=sha1"}, flags...)
	if out, err := exec.Command(gcc, append(args, "-o", lib, src)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// Split is an ELF file split as distributions ship it.
type Split struct {
	Stripped string // no DWARF, no .symtab; a .gnu_debuglink to Debug
	Debug    string // the DWARF and .symtab (objcopy --only-keep-debug)
	BuildID  string
}

// SplitDebug writes, from src (an ELF file with DWARF and .symtab), a
// stripped copy at stripped and its debug file at debug, linked by
// .gnu_debuglink (the link names debug's base name).
func SplitDebug(t testing.TB, src, stripped, debug string) Split {
	t.Helper()
	objcopy := testskip.Command(t, "objcopy", "binutils")
	for _, p := range []string{stripped, debug} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"--only-keep-debug", src, debug},
		{"--strip-debug", "--strip-unneeded", "--add-gnu-debuglink=" + debug, src, stripped},
	} {
		if out, err := exec.Command(objcopy, args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, out)
		}
	}
	f, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.SectionByType(elf.SHT_SYMTAB) != nil || f.Section(".debug_info") != nil {
		t.Fatalf("%s still has .symtab or .debug_info after stripping", stripped)
	}
	return Split{Stripped: stripped, Debug: debug, BuildID: BuildID(t, src)}
}

// BuildID reads the GNU build-id of an ELF file, as hex.
func BuildID(t testing.TB, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Fatalf("%s has no build-id", path)
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		t.Fatalf("%s: build-id note: %v", path, err)
	}
	n := f.ByteOrder.Uint32(b[4:])
	if uint32(len(b)) < 16+n {
		t.Fatalf("%s: short build-id note", path)
	}
	return fmt.Sprintf("%x", b[16:16+n])
}

// SymbolAddr returns the virtual address of the function name in the
// .symtab of path.
func SymbolAddr(t testing.TB, path, name string) (addr, size uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value, s.Size
		}
	}
	t.Fatalf("%s: no function %s", path, name)
	return 0, 0
}

// Server is a running debuginfod.
type Server struct {
	URL string // http://127.0.0.1:PORT, the forwarder
	log *testruby.Log
}

// Log is what debuginfod printed.
func (s *Server) Log() string { return s.log.String() }

// innerPort is debuginfod's port inside its own network namespace.
const innerPort = "8002"

// Serve starts elfutils' debuginfod scanning dirs (-F) in a network
// namespace of its own, and a forwarder on 127.0.0.1 to it. Both stop when
// the test ends. Call WaitFor before asking it for a file: it serves only
// what it has scanned.
func Serve(t testing.TB, dirs ...string) *Server {
	t.Helper()
	bin := testskip.Command(t, "debuginfod", "debuginfod")
	testskip.Command(t, "unshare", "util-linux")
	testskip.Command(t, "ip", "iproute2")
	testskip.Root(t, "to serve debuginfod in a network namespace of its own")
	db := filepath.Join(t.TempDir(), "debuginfod.sqlite")
	args := []string{"--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		bin, "-F", "-p", innerPort, "-d", db, "-t", "0", "-g", "0", "-c", "1"}
	args = append(args, dirs...)
	cmd := exec.Command("unshare", args...)
	log := &testruby.Log{Max: 1 << 20}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start debuginfod: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	ns := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	// unshare execs sh, which execs debuginfod: one pid. Wait until the
	// namespace is its own (unshare has run) and the server listens.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := dialInNetns(ns, "127.0.0.1:"+innerPort)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("debuginfod exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("debuginfod not listening within 20s: %v\n%s", err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go forward(ln, ns)
	return &Server{URL: "http://" + ln.Addr().String(), log: log}
}

// WaitFor polls the server until it serves buildID's debuginfo (it scans
// in the background), failing the test after timeout.
func (s *Server) WaitFor(t testing.TB, buildID string, timeout time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(s.URL + "/buildid/" + buildID + "/debuginfo")
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("debuginfod did not serve %s within %s (last: %v)\n%s", buildID, timeout, err, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// forward copies each connection to ln to the server inside the namespace.
func forward(ln net.Listener, ns string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			s, err := dialInNetns(ns, "127.0.0.1:"+innerPort)
			if err != nil {
				return
			}
			defer s.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(s, c); s.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { io.Copy(c, s); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

// dialInNetns connects to addr from inside the network namespace ns: the
// socket is made on an OS thread moved into it, which is never used again
// (the goroutine exits locked, so the runtime ends the thread).
func dialInNetns(ns, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(ns)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// Refusing returns a URL on 127.0.0.1 where nothing listens: a server that
// is down.
func Refusing(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// A SilentServer accepts connections on 127.0.0.1 and never answers: a
// server that hangs. It counts the connections, so that a test can tell
// whether it was asked again without timing it.
type SilentServer struct {
	URL string

	mu    sync.Mutex
	conns []net.Conn
}

// Accepted is the number of connections the server has accepted.
func (s *SilentServer) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Silent starts a SilentServer; it stops when the test ends.
func Silent(t testing.TB) *SilentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &SilentServer{URL: "http://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}
