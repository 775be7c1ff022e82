package rubybuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// splitDebug makes, under root, a libruby without DWARF (with a
// .gnu_debuglink) and its separate debug file, from the 3.1.2 shared build.
func splitDebug(t *testing.T, root string) (lib, dbg, buildID string) {
	t.Helper()
	objcopy := testskip.Command(t, "objcopy", "binutils")
	src := testruby.Get(t, "source-3.1-shared").VM
	dir := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lib = filepath.Join(dir, "libruby.so.3.1.2")
	dbg = filepath.Join(t.TempDir(), "libruby.so.3.1.2.debug")
	for _, args := range [][]string{
		{"--only-keep-debug", src, dbg},
		{"--strip-all", "--add-gnu-debuglink=" + dbg, src, lib},
	} {
		if out, err := exec.Command(objcopy, args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, out)
		}
	}
	e, err := openELF(src)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	return lib, dbg, debuginfo.ReadIdentity(e.f).BuildID
}

func TestDebugFiles(t *testing.T) {
	root := t.TempDir()
	lib, dbg, id := splitDebug(t, root)
	inRoot := "/usr/lib/x86_64-linux-gnu/libruby.so.3.1.2"

	layoutFrom := func(t *testing.T, opts OpenOptions) (*Layout, *Binary) {
		t.Helper()
		opts.MappedAs = inRoot
		b, err := OpenBinary(lib, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		l, err := b.Layout()
		if err != nil {
			t.Fatal(err)
		}
		return l, b
	}

	t.Run("none", func(t *testing.T) {
		l, _ := layoutFrom(t, OpenOptions{Root: root})
		if !strings.HasPrefix(l.Source, "table:") {
			t.Errorf("without a debug file the source is %q, want the table", l.Source)
		}
	})
	t.Run("build-id", func(t *testing.T) {
		p := filepath.Join(root, "usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
		testruby.CopyFile(t, dbg, p)
		defer os.Remove(p)
		l, b := layoutFrom(t, OpenOptions{Root: root})
		if l.Source != "dwarf:"+p || b.DebugFile != p {
			t.Errorf("source %q, debug file %q; want %s", l.Source, b.DebugFile, p)
		}
		if a := b.Anchors(l); a.GlobalSymbols.How != string(fromDebugFile) {
			t.Errorf("ruby_global_symbols found by %q, want the debug file's symtab", a.GlobalSymbols.How)
		}
	})
	t.Run("debuglink", func(t *testing.T) {
		p := filepath.Join(filepath.Dir(lib), ".debug", filepath.Base(dbg))
		testruby.CopyFile(t, dbg, p)
		defer os.Remove(p)
		l, _ := layoutFrom(t, OpenOptions{Root: root})
		if l.Source != "dwarf:"+p {
			t.Errorf("source %q, want %s", l.Source, p)
		}
	})
	t.Run("debuglink-crc-mismatch", func(t *testing.T) {
		p := filepath.Join(filepath.Dir(lib), filepath.Base(dbg))
		testruby.CopyFile(t, testruby.Get(t, "source-3.3-static").VM, p) // right name, wrong file
		defer os.Remove(p)
		l, _ := layoutFrom(t, OpenOptions{Root: root})
		if !strings.HasPrefix(l.Source, "table:") {
			t.Errorf("a debug file with the wrong CRC was used: %q", l.Source)
		}
	})
	t.Run("explicit", func(t *testing.T) {
		l, _ := layoutFrom(t, OpenOptions{Root: root, DebugFile: dbg})
		if l.Source != "dwarf:"+dbg {
			t.Errorf("source %q, want %s", l.Source, dbg)
		}
	})
	t.Run("explicit-wrong-build", func(t *testing.T) {
		_, err := OpenBinary(lib, OpenOptions{Root: root, DebugFile: testruby.Get(t, "source-3.3-static").VM, MappedAs: inRoot})
		if err == nil || !strings.Contains(err.Error(), "build-id") {
			t.Errorf("err = %v, want a build-id mismatch", err)
		}
	})
}
