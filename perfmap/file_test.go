package perfmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

const testPid = 4242

// frames returns n entries named like Ruby frames, stride bytes each, at
// offsets from 0: what WriteSynthetic takes.
func frames(prefix string, n int, stride uint64) []Entry {
	out := make([]Entry, n)
	for i := range out {
		out[i] = Entry{Start: uint64(i) * stride, Size: stride, Name: fmt.Sprintf("%sObject#method_%d foo.rb:%d", prefix, i, i+1)}
	}
	return out
}

// moved returns entries with base added to their starts.
func moved(entries []Entry, base uint64) []Entry {
	out := slices.Clone(entries)
	for i := range out {
		out[i].Start += base
	}
	return out
}

// lines formats entries as the writer does, one write: a newline, then
// the lines.
func lines(entries []Entry) string {
	var b strings.Builder
	b.WriteString("\n")
	for _, e := range entries {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

func requireRoot(t *testing.T) {
	t.Helper()
	testskip.Root(t, "to give files to another user")
}

func statOf(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	in := frames("", 100, 16)
	path, base, err := WriteSynthetic(dir, testPid, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "perf-4242.map") || base != Floor {
		t.Fatalf("path %s base %#x, want %s/perf-4242.map and %#x", path, base, dir, Floor)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := lines(moved(in, base)); string(data) != want {
		t.Fatalf("file:\n%q\nwant\n%q", data, want)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, moved(in, base)) {
		t.Fatalf("parsed %v", got)
	}
	st := statOf(t, path)
	umask := syscall.Umask(0)
	syscall.Umask(umask)
	if st.Mode&0o777 != Mode&^uint32(umask) || int(st.Uid) != os.Geteuid() {
		t.Errorf("mode %o uid %d, want %o and %d", st.Mode&0o777, st.Uid, Mode&^umask, os.Geteuid())
	}

	// A second run of other names stacks above the first.
	second := frames("second ", 10, 16)
	_, base2, err := WriteSynthetic(dir, testPid, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := alignUp(base + 100*16); base2 != want {
		t.Fatalf("second base %#x, want %#x", base2, want)
	}

	// Absolute entries through Map.
	m, err := Open(dir, testPid, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Created() || m.Path() != path {
		t.Fatalf("created %v path %s", m.Created(), m.Path())
	}
	abs := []Entry{{0x7f0000100000, 0x40, "[JIT] by hand"}, {0x7f0000100040, 0x10, "abc"}}
	if err := m.Append(abs); err != nil {
		t.Fatal(err)
	}
	all, err := m.Entries()
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(moved(in, base), moved(second, base2)...), abs...)
	if !slices.Equal(all, want) {
		t.Fatalf("entries %v\nwant %v", all, want)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(abs); err == nil {
		t.Fatal("append after close succeeded")
	}
}

func TestAppendRefusesBadEntries(t *testing.T) {
	dir := t.TempDir()
	m, err := Open(dir, testPid, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Created() {
		t.Fatal("not created")
	}
	if err := m.Append([]Entry{{Floor, 0x100, "existing"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		entries []Entry
		msg     string
	}{
		{"size 0", []Entry{{0x1000, 0, "abc"}}, "size 0"},
		{"short name", []Entry{{0x1000, 1, "ab"}}, "shorter than 3"},
		{"newline", []Entry{{0x1000, 1, "a\nb"}}, "newline"},
		{"carriage return", []Entry{{0x1000, 1, "abc\r"}}, "newline"},
		{"NUL", []Entry{{0x1000, 1, "a\x00bc"}}, "NUL"},
		{"long name", []Entry{{0x1000, 1, strings.Repeat("n", maxName+1)}}, "longer than"},
		{"wraps", []Entry{{^uint64(0) - 1, 4, "abc"}}, "2^64"},
		{"overlap in batch", []Entry{{0x1000, 0x20, "abc"}, {0x1010, 0x20, "def"}}, "overlap"},
		{"overlap with file", []Entry{{Floor + 0xff, 1, "abc"}}, "already in the map"},
	} {
		err := m.Append(c.entries)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.msg)
		}
	}
	if _, _, err := WriteSynthetic(dir, testPid, nil, nil); err == nil {
		t.Error("WriteSynthetic with no entries succeeded")
	}
	if _, err := Open(dir, 0, nil); err == nil {
		t.Error("pid 0 accepted")
	}
	m.Close()
	data, _ := os.ReadFile(Path(dir, testPid))
	if string(data) != lines([]Entry{{Floor, 0x100, "existing"}}) {
		t.Fatalf("refused entries were written: %q", data)
	}
}

// TestCoexistence appends beside a map YJIT and ZJIT wrote, the last line
// half written, and an earlier run's synthetic range.
func TestCoexistence(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, testPid)
	earlier := Entry{Floor, 0x3000, "earlier run Object#foo"}
	old := jitLines + earlier.String() + "\n" + "7f8a3c020000 4" // YJIT is mid-line
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	in := frames("", 50, 32)
	_, base, err := WriteSynthetic(dir, testPid, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(old)) {
		t.Fatalf("the existing content changed:\n%q", data)
	}
	got, err := Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	oldEntries := append(slices.Clone(jitEntries), earlier)
	if want := append(slices.Clone(oldEntries), moved(in, base)...); !slices.Equal(got, want) {
		t.Fatalf("entries %v\nwant %v", got, want)
	}
	for _, n := range moved(in, base) {
		for _, o := range oldEntries {
			if n.Start < o.End() && o.Start < n.End() {
				t.Fatalf("%v overlaps %v", n, o)
			}
		}
	}
	if base < earlier.End() {
		t.Fatalf("base %#x below the earlier run's end %#x", base, earlier.End())
	}
}

// checkRefused checks a refusal: ErrRefused, one line naming the path and
// what to do.
func checkRefused(t *testing.T, err error, path, what string) {
	t.Helper()
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("got %v, want a refusal", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, path) || !strings.Contains(msg, "rm "+path) || !strings.Contains(msg, what) {
		t.Fatalf("message %q: want one line with the path, %q and what to do", msg, what)
	}
	t.Log(msg)
}

// openWithin runs Open in a goroutine and fails if it blocks.
func openWithin(t *testing.T, dir string, opts *Options) (*Map, error) {
	t.Helper()
	type result struct {
		m   *Map
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := Open(dir, testPid, opts)
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Open blocked")
		return nil, nil
	}
}

func TestRefuses(t *testing.T) {
	const precious = "precious\n"
	t.Run("symlink", func(t *testing.T) {
		dir, elsewhere := t.TempDir(), t.TempDir()
		target := filepath.Join(elsewhere, "shadow")
		if err := os.WriteFile(target, []byte(precious), 0o644); err != nil {
			t.Fatal(err)
		}
		path := Path(dir, testPid)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		_, _, err := WriteSynthetic(dir, testPid, frames("", 3, 16), nil)
		checkRefused(t, err, path, "symbolic link")
		if data, _ := os.ReadFile(target); string(data) != precious {
			t.Fatalf("target changed: %q", data)
		}
		_, err = ReadFile(path)
		checkRefused(t, err, path, "symbolic link")
	})
	t.Run("dangling symlink", func(t *testing.T) {
		dir, elsewhere := t.TempDir(), t.TempDir()
		target := filepath.Join(elsewhere, "created-by-us")
		path := Path(dir, testPid)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		_, err := openWithin(t, dir, nil)
		checkRefused(t, err, path, "symbolic link")
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the link's target was created: %v", err)
		}
	})
	t.Run("hardlink", func(t *testing.T) {
		dir := t.TempDir()
		other := filepath.Join(dir, "other")
		if err := os.WriteFile(other, []byte(precious), 0o644); err != nil {
			t.Fatal(err)
		}
		path := Path(dir, testPid)
		if err := os.Link(other, path); err != nil {
			t.Fatal(err)
		}
		_, err := openWithin(t, dir, nil)
		checkRefused(t, err, path, "2 hard links")
		if data, _ := os.ReadFile(other); string(data) != precious {
			t.Fatalf("file changed: %q", data)
		}
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		path := Path(dir, testPid)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := openWithin(t, dir, nil)
		checkRefused(t, err, path, "directory")
		_, err = ReadFile(path)
		checkRefused(t, err, path, "directory")
	})
	t.Run("fifo", func(t *testing.T) {
		dir := t.TempDir()
		path := Path(dir, testPid)
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := openWithin(t, dir, nil)
		checkRefused(t, err, path, "named pipe")
		_, err = ReadFile(path)
		checkRefused(t, err, path, "named pipe")
	})
	t.Run("socket", func(t *testing.T) {
		// A short directory: a socket's path has at most 107 bytes, and
		// t.TempDir's names the test.
		dir, err := os.MkdirTemp("", "perfmap")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := Path(dir, testPid)
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = openWithin(t, dir, nil)
		checkRefused(t, err, path, "socket")
	})
	t.Run("other owner", func(t *testing.T) {
		requireRoot(t)
		dir := t.TempDir()
		path := Path(dir, testPid)
		if err := os.WriteFile(path, []byte(jitLines), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, _, err := WriteSynthetic(dir, testPid, frames("", 3, 16), nil)
		checkRefused(t, err, path, "belongs to uid 65534")
		_, _, err = WriteSynthetic(dir, testPid, frames("", 3, 16), &Options{Owner: &Owner{UID: 1000, GID: 1000}})
		checkRefused(t, err, path, "or uid 1000 (the process's owner)")
		if data, _ := os.ReadFile(path); string(data) != jitLines {
			t.Fatalf("file changed: %q", data)
		}
		// It is the profiled process's own map (its --yjit-perf made it).
		_, base, err := WriteSynthetic(dir, testPid, frames("", 3, 16), &Options{Owner: &Owner{UID: 65534, GID: 65534}})
		if err != nil {
			t.Fatal(err)
		}
		if data, _ := os.ReadFile(path); string(data) != jitLines+lines(moved(frames("", 3, 16), base)) {
			t.Fatalf("file: %q", data)
		}
		if st := statOf(t, path); st.Uid != 65534 {
			t.Fatalf("owner changed to %d", st.Uid)
		}
	})
}

// TestCreatedForOwner: a map created for another user's process belongs
// to that user, so its --yjit-perf can still append.
func TestCreatedForOwner(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} { // let uid 65534 in
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Open(dir, testPid, &Options{Owner: &Owner{UID: 65534, GID: 65534}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Created() {
		t.Fatal("not created")
	}
	if st := statOf(t, m.Path()); st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("owner %d:%d, want 65534:65534", st.Uid, st.Gid)
	}
	if err := m.Append([]Entry{{Floor, 0x10, "Object#foo"}}); err != nil {
		t.Fatal(err)
	}
	// The process's user can open it to append, as YJIT does.
	cmd := exec.Command("/bin/sh", "-c", "echo '7f8a3c00a000 40 [JIT] Integer#times' >> "+m.Path())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("append as uid 65534: %v %s", err, out)
	}
}

func TestLockTimeout(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, testPid)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, testPid, &Options{LockTimeout: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "held its lock") || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want a lock timeout", err)
	}
	syscall.Flock(int(holder.Fd()), syscall.LOCK_UN)
	m, err := Open(dir, testPid, &Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// TestReplacedWhileWaiting: the map is removed and made anew while Open
// waits for the lock; the entries go to the new file, which perf reads.
func TestReplacedWhileWaiting(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, testPid)
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := syscall.Flock(int(holder.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := WriteSynthetic(dir, testPid, frames("", 2, 16), nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(jitLines), 0o644); err != nil {
		t.Fatal(err)
	}
	holder.Close() // releases the lock on the old file
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil || len(got) != len(jitEntries)+2 {
		t.Fatalf("new file has %v, %v", got, err)
	}
}

// written is what one WriteSynthetic call wrote, in absolute addresses.
type written []Entry

// checkWrites parses the map and checks that every entry written is there
// once and whole, that they are disjoint, and that nothing else in the
// file overlaps them. It returns the lines that were not entries.
func checkWrites(t *testing.T, path string, writes []written) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{}
	var ours []Entry
	for _, w := range writes {
		for _, e := range w {
			want[e.Name] = e
			ours = append(ours, e)
		}
	}
	seen := map[string]bool{}
	var junk []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxLine)
	for sc.Scan() {
		e, ok := parseLine(sc.Bytes())
		if !ok {
			junk = append(junk, sc.Text())
			continue
		}
		w, mine := want[e.Name]
		switch {
		case mine && seen[e.Name]:
			t.Fatalf("%q written twice", e.Name)
		case mine && w != e:
			t.Fatalf("line %q, want %v", sc.Text(), w)
		case !mine:
			if o, bad := overlapping(sortedByStart(ours), e); bad {
				t.Fatalf("foreign line %q overlaps %v", sc.Text(), o)
			}
		}
		seen[e.Name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if !seen[name] {
			t.Fatalf("%q missing", name)
		}
	}
	if err := checkEntries(ours, 0); err != nil {
		t.Fatalf("written entries: %v", err)
	}
	return junk
}

// yjitLike appends lines as YJIT's unbuffered writeln! does: without a
// lock, one line in five write calls.
func yjitLike(t *testing.T, path string, n int) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	for i := range n {
		for _, piece := range []string{strconv.FormatUint(0x7f8a3c000000+uint64(i)*0x40, 16), " ", "40", " ", "[JIT] Integer#times", "\n"} {
			if _, err := f.WriteString(piece); err != nil {
				t.Error(err)
				return
			}
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, testPid)
	const writers, calls, perCall = 4, 40, 25
	var mu sync.Mutex
	var writes []written
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range calls {
				in := frames(fmt.Sprintf("w%d-c%d-", w, c), perCall, 8+uint64(c))
				_, base, err := WriteSynthetic(dir, testPid, in, nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				writes = append(writes, moved(in, base))
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		yjitLike(t, path, 2000)
	}()
	wg.Wait()
	if t.Failed() {
		return
	}
	junk := checkWrites(t, path, writes)
	blank := 0
	for _, l := range junk {
		if l == "" {
			blank++
		}
	}
	// One blank line per write; a few JIT lines cut by our writes.
	t.Logf("%d writes, %d blank lines, %d pieces of cut JIT lines, e.g. %q", len(writes), blank, len(junk)-blank, slices.DeleteFunc(junk, func(s string) bool { return s == "" })[:min(len(junk)-blank, 4)])
	entries, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	jit := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name, "[JIT]") {
			jit++
		}
	}
	if jit+(len(junk)-blank) < 2000 || jit < 1900 {
		t.Fatalf("only %d of 2000 JIT lines whole, %d junk", jit, len(junk)-blank)
	}
}

// TestMain runs the test binary as one of TestConcurrentProcesses's
// writers when it is started as one, else the tests.
func TestMain(m *testing.M) {
	if dir := os.Getenv("PERFMAP_HELPER_DIR"); dir != "" {
		os.Exit(helperWriter(dir, os.Getenv("PERFMAP_HELPER_ID")))
	}
	os.Exit(m.Run())
}

// helperWriter is one process of TestConcurrentProcesses: it writes 30
// maps into dir and prints where each went.
func helperWriter(dir, id string) int {
	for c := range 30 {
		in := frames(fmt.Sprintf("p%s-c%d-", id, c), 60, 16)
		_, base, err := WriteSynthetic(dir, testPid, in, nil)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("BASE %d %x\n", c, base)
	}
	return 0
}

func TestConcurrentProcesses(t *testing.T) {
	dir := t.TempDir()
	const procs = 4
	outs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "PERFMAP_HELPER_DIR="+dir, "PERFMAP_HELPER_ID="+strconv.Itoa(i))
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	var writes []written
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer %d: %v\n%s", i, err, outs[i].String())
		}
		n := 0
		for _, l := range strings.Split(outs[i].String(), "\n") {
			var c int
			var base uint64
			if _, err := fmt.Sscanf(l, "BASE %d %x", &c, &base); err == nil {
				writes = append(writes, moved(frames(fmt.Sprintf("p%d-c%d-", i, c), 60, 16), base))
				n++
			}
		}
		if n != 30 {
			t.Fatalf("writer %d reported %d writes:\n%s", i, n, outs[i].String())
		}
	}
	for _, l := range checkWrites(t, Path(dir, testPid), writes) {
		if l != "" {
			t.Fatalf("junk line %q", l)
		}
	}
}
