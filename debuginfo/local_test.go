package debuginfo

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
)

// fixture is a stripped library inside a fake root filesystem, and its
// debug file outside it.
type fixture struct {
	root, name, lib, dbg, id string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	dir := t.TempDir()
	src := debuginfodtest.CLib(t, dir)
	root := t.TempDir()
	name := "/usr/lib/x86_64-linux-gnu/libfake.so.1"
	sp := debuginfodtest.SplitDebug(t, src, filepath.Join(root, name), filepath.Join(dir, "dbg", "libfake.so.1.debug"))
	return fixture{root: root, name: name, lib: sp.Stripped, dbg: sp.Debug, id: sp.BuildID}
}

func (fx fixture) req(t *testing.T) Request {
	return Request{ID: identityOf(t, fx.lib), Name: fx.name, Root: fx.root}
}

func place(t *testing.T, from, to string) string {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return to
}

func TestIdentity(t *testing.T) {
	fx := newFixture(t)
	id := identityOf(t, fx.lib)
	if id.BuildID != fx.id || id.Link != "libfake.so.1.debug" || id.HasDWARF || id.HasSymtab {
		t.Errorf("stripped identity %+v; want build-id %s, link libfake.so.1.debug, no DWARF, no symtab", id, fx.id)
	}
	crc, err := func() (uint32, error) {
		f, err := os.Open(fx.dbg)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return fileCRC32(f)
	}()
	if err != nil || crc != id.LinkCRC {
		t.Errorf("CRC32 of the debug file %#x (%v), the link says %#x", crc, err, id.LinkCRC)
	}
	if d := identityOf(t, fx.dbg); d.BuildID != fx.id || !d.HasDWARF || !d.HasSymtab {
		t.Errorf("debug file identity %+v", d)
	}
}

// TestLookupOrder puts the debug file where distributions and users put it,
// one place at a time and several at once, and checks which one is used.
func TestLookupOrder(t *testing.T) {
	fx := newFixture(t)
	byID := filepath.Join(fx.root, "usr/lib/debug/.build-id", fx.id[:2], fx.id[2:]+".debug")
	dir := filepath.Dir(fx.name)
	beside := filepath.Join(fx.root, dir, "libfake.so.1.debug")
	dotDebug := filepath.Join(fx.root, dir, ".debug", "libfake.so.1.debug")
	global := filepath.Join(fx.root, "usr/lib/debug", dir, "libfake.so.1.debug")

	var f *Finder // nil: local only
	find := func() string {
		t.Helper()
		p, err := f.Find(fx.req(t))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := find(); p != "" {
		t.Fatalf("found %q with no debug file anywhere", p)
	}
	for _, c := range []struct{ name, path string }{
		{"global", global}, {".debug", dotDebug}, {"beside", beside}, {"build-id", byID},
	} {
		// Each is placed in addition to the earlier ones and must win.
		place(t, fx.dbg, c.path)
		if p := find(); p != c.path {
			t.Errorf("%s: found %q, want %q", c.name, p, c.path)
		}
	}
	for _, p := range []string{byID, beside, dotDebug, global} {
		os.Remove(p)
	}

	t.Run("explicit", func(t *testing.T) {
		place(t, fx.dbg, byID)
		defer os.Remove(byID)
		req := fx.req(t)
		req.Explicit = fx.dbg
		if p, err := f.Find(req); p != fx.dbg || err != nil {
			t.Errorf("explicit: %q, %v; want %s", p, err, fx.dbg)
		}
		other := debuginfodtest.CLib(t, t.TempDir()) // the same source, built again elsewhere
		req.Explicit = other
		if _, err := f.Find(req); err == nil || !strings.Contains(err.Error(), "build-id") {
			if BuildIDOf2(t, other) != fx.id {
				t.Errorf("explicit file of another build: err = %v, want a build-id mismatch", err)
			}
		}
		req.Explicit = filepath.Join(t.TempDir(), "missing.debug")
		if _, err := f.Find(req); err == nil {
			t.Error("a missing explicit file is not an error")
		}
	})
	t.Run("files-by-build-id", func(t *testing.T) {
		var lines []string
		g := &Finder{Files: []string{filepath.Join(t.TempDir(), "nope"), fx.dbg}, Report: func(s string) { lines = append(lines, s) }}
		if p, _ := g.Find(fx.req(t)); p != fx.dbg {
			t.Errorf("--debug-file by build-id: %q, want %s", p, fx.dbg)
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "nope") {
			t.Errorf("an unusable --debug-file is reported once: %q", lines)
		}
	})
	t.Run("crc-mismatch", func(t *testing.T) {
		// The right name, another build (no build-id match, wrong CRC).
		p := place(t, debuginfodtest.CLib(t, t.TempDir()), beside)
		defer os.Remove(p)
		if got := find(); got != "" {
			t.Errorf("a file with the wrong CRC and build-id was used: %q", got)
		}
	})
	t.Run("no-debug-content", func(t *testing.T) {
		// The stripped file itself under the debug file's name: the
		// build-id matches, but it has neither DWARF nor symbols.
		p := place(t, fx.lib, beside)
		defer os.Remove(p)
		q := place(t, fx.lib, byID)
		defer os.Remove(q)
		if got := find(); got != "" {
			t.Errorf("a file without DWARF or .symtab was taken for the debug file: %q", got)
		}
	})
	t.Run("crc-only", func(t *testing.T) {
		// No build-id to compare: the CRC decides.
		p := place(t, fx.dbg, beside)
		defer os.Remove(p)
		req := fx.req(t)
		req.ID.BuildID = ""
		if got, _ := f.Find(req); got != p {
			t.Errorf("CRC match: %q, want %q", got, p)
		}
		req.ID.LinkCRC ^= 1
		if got, _ := f.Find(req); got != "" {
			t.Errorf("CRC mismatch accepted: %q", got)
		}
	})
	t.Run("host-build-id-tree-is-not-root", func(t *testing.T) {
		// Root "/" is never the fake root: nothing found there.
		req := fx.req(t)
		req.Root = "/"
		if got, _ := f.Find(req); got != "" && strings.HasPrefix(got, fx.root) {
			t.Errorf("root / found a file in the fake root: %q", got)
		}
	})
}

func BuildIDOf2(t *testing.T, p string) string {
	id, err := BuildIDOf(p)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestHostileInput: names and build-ids from a file (or a container) must
// not lead outside the debug directories or the container's root.
func TestHostileInput(t *testing.T) {
	fx := newFixture(t)
	var f *Finder
	t.Run("symlink-out-of-root", func(t *testing.T) {
		// A container's build-id entry pointing at an absolute path: it is
		// resolved inside the root, where there is nothing.
		link := filepath.Join(fx.root, "usr/lib/debug/.build-id", fx.id[:2], fx.id[2:]+".debug")
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(fx.dbg, link); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(link)
		if p, _ := f.Find(fx.req(t)); p != "" {
			t.Errorf("followed a symlink out of the root: %q", p)
		}
		// The same symlink pointing inside the root is fine.
		inside := place(t, fx.dbg, filepath.Join(fx.root, "opt/dbg/x.debug"))
		os.Remove(link)
		os.Symlink("/opt/dbg/x.debug", link)
		if p, _ := f.Find(fx.req(t)); p != link {
			t.Errorf("symlink inside the root: %q, want %q (-> %s)", p, link, inside)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		p := filepath.Join(fx.root, filepath.Dir(fx.name), "libfake.so.1.debug")
		if err := unixMkfifo(p); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
		if got, _ := f.Find(fx.req(t)); got != "" {
			t.Errorf("a FIFO was taken: %q", got)
		}
	})
	t.Run("debuglink-names", func(t *testing.T) {
		for _, name := range []string{"../../../etc/passwd", "/etc/passwd", "..", ".", "a/b", "x\ny", strings.Repeat("a", 300)} {
			b := append([]byte(name), 0)
			for len(b)%4 != 0 {
				b = append(b, 0)
			}
			b = binary.LittleEndian.AppendUint32(b, 1234)
			if got, _ := parseDebugLink(b, binary.LittleEndian); got != "" {
				t.Errorf("debuglink %q accepted as %q", name, got)
			}
			req := fx.req(t)
			req.ID.Link = name
			req.ID.BuildID = ""
			if got, _ := f.Find(req); got != "" {
				t.Errorf("Find with debuglink %q: %q", name, got)
			}
		}
		if got, crc := parseDebugLink([]byte("ok.debug\x00\x00\x00\x00\x01\x02\x03\x04"), binary.LittleEndian); got != "ok.debug" || crc != 0x04030201 {
			t.Errorf("plain debuglink: %q %#x", got, crc)
		}
		if got, _ := parseDebugLink([]byte("ok.debug\x00\x00\x00"), binary.LittleEndian); got != "" {
			t.Errorf("debuglink without room for its CRC accepted: %q", got)
		}
	})
	t.Run("build-ids", func(t *testing.T) {
		for _, id := range []string{"", "a", "ab", "abc", "../../etc", "ABCDEF01", "zz11", "ab/cd", strings.Repeat("ab", 65)} {
			if ValidBuildID(id) {
				t.Errorf("build-id %q accepted", id)
			}
			g := &Finder{URLs: []string{"http://127.0.0.1:1"}, CacheDir: t.TempDir()}
			if p, _ := g.Find(Request{ID: Identity{BuildID: id}, Name: "/x", Root: fx.root}); p != "" {
				t.Errorf("Find(build-id %q) = %q", id, p)
			}
		}
		for _, id := range []string{"abcd", fx.id, strings.Repeat("0f", 64)} {
			if !ValidBuildID(id) {
				t.Errorf("build-id %q refused", id)
			}
		}
	})
	t.Run("note-parsing", func(t *testing.T) {
		note := func(namesz, descsz, typ uint32, name string, desc []byte) []byte {
			var b bytes.Buffer
			binary.Write(&b, binary.LittleEndian, [3]uint32{namesz, descsz, typ})
			b.WriteString(name)
			for b.Len()%4 != 0 {
				b.WriteByte(0)
			}
			b.Write(desc)
			for b.Len()%4 != 0 {
				b.WriteByte(0)
			}
			return b.Bytes()
		}
		good := note(4, 4, 3, "GNU\x00", []byte{0xde, 0xad, 0xbe, 0xef})
		if got := parseBuildIDNote(good, binary.LittleEndian); got != "deadbeef" {
			t.Errorf("good note: %q", got)
		}
		for _, b := range [][]byte{
			note(4, 0xffffffff, 3, "GNU\x00", nil),
			note(0xfffffff0, 4, 3, "GNU\x00", []byte{1, 2, 3, 4}),
			note(4, 1, 3, "GNU\x00", []byte{1}), // one byte: too short to be a build-id
			note(4, 4, 1, "GNU\x00", []byte{1, 2, 3, 4}),
			good[:14],
		} {
			if got := parseBuildIDNote(b, binary.LittleEndian); got != "" {
				t.Errorf("bad note %x gave %q", b, got)
			}
		}
	})
}

func TestParseURLs(t *testing.T) {
	urls, bad := ParseURLs("  http://a:8002/ https://b.example/debuginfod  http://a:8002 file:///srv ftp://x http:// not-a-url\thttp://c ")
	want := []string{"http://a:8002", "https://b.example/debuginfod", "http://c"}
	if strings.Join(urls, " ") != strings.Join(want, " ") {
		t.Errorf("urls %q, want %q", urls, want)
	}
	if len(bad) != 4 {
		t.Errorf("bad %q, want file:, ftp:, http:// and not-a-url", bad)
	}
}

func TestCacheDir(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DEBUGINFOD_CACHE_PATH": "/c", "XDG_CACHE_HOME": "/x", "HOME": home}, "/c"},
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": home}, "/x/debuginfod_client"},
		{map[string]string{"HOME": home}, home + "/.cache/debuginfod_client"},
		{map[string]string{}, "/.cache/debuginfod_client"},
	} {
		if got := cacheDir(env(c.env)); got != c.want {
			t.Errorf("cacheDir(%v) = %q, want %q", c.env, got, c.want)
		}
	}
	// The old default wins over XDG when it exists, as in elfutils.
	os.Mkdir(filepath.Join(home, ".debuginfod_client_cache"), 0o700)
	if got := cacheDir(env(map[string]string{"XDG_CACHE_HOME": "/x", "HOME": home})); got != home+"/.debuginfod_client_cache" {
		t.Errorf("with ~/.debuginfod_client_cache: %q", got)
	}
	f := fromEnv(env(map[string]string{"DEBUGINFOD_TIMEOUT": "7", "DEBUGINFOD_MAXTIME": "9", "DEBUGINFOD_MAXSIZE": "1000", "HOME": home}), nil)
	if f.Timeout.Seconds() != 7 || f.MaxTime.Seconds() != 9 || f.MaxSize != 1000 || len(f.URLs) != 0 {
		t.Errorf("fromEnv: timeout %s, maxtime %s, maxsize %d, urls %q", f.Timeout, f.MaxTime, f.MaxSize, f.URLs)
	}
	if f := fromEnv(env(nil), nil); f.Timeout != DefaultTimeout || f.MaxTime != 0 || f.MaxSize != 0 {
		t.Errorf("defaults: %s %s %d", f.Timeout, f.MaxTime, f.MaxSize)
	}
	if f := fromEnv(env(map[string]string{"DEBUGINFOD_TIMEOUT": "0"}), nil); f.Timeout != 0 {
		t.Errorf("DEBUGINFOD_TIMEOUT=0 means no timeout; got %s", f.Timeout)
	}
}
