package native

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestDebugFileSymbols: a stripped library's static function, which only
// .symtab names, is named from its separate debug file, found beside it or
// downloaded from a real debuginfod.
func TestDebugFileSymbols(t *testing.T) {
	dir := t.TempDir()
	src := debuginfodtest.CLib(t, dir)
	addr, size := debuginfodtest.SymbolAddr(t, src, debuginfodtest.StaticFunc)
	exported, _ := debuginfodtest.SymbolAddr(t, src, debuginfodtest.ExportedFunc)
	inside := addr + size/2

	libDir := filepath.Join(dir, "lib")
	served := filepath.Join(dir, "served")
	sp := debuginfodtest.SplitDebug(t, src, filepath.Join(libDir, "libfake.so.1"), filepath.Join(served, "libfake.so.1.debug"))

	if o := LoadObject(src); !named(o, inside, debuginfodtest.StaticFunc) {
		t.Fatalf("the unstripped library does not name %s at %#x", debuginfodtest.StaticFunc, inside)
	}
	o := LoadObject(sp.Stripped)
	if name, _, ok := o.Symbol(inside); ok {
		t.Fatalf("the stripped library names %#x %q with no debug file anywhere", inside, name)
	}
	if !named(o, exported, debuginfodtest.ExportedFunc) {
		t.Errorf("the exported function is not named from .dynsym")
	}

	t.Run("debuglink-beside", func(t *testing.T) {
		p := filepath.Join(libDir, "libfake.so.1.debug")
		b, _ := os.ReadFile(sp.Debug)
		os.WriteFile(p, b, 0o644)
		defer os.Remove(p)
		o := LoadObject(sp.Stripped)
		if !named(o, inside, debuginfodtest.StaticFunc) {
			t.Errorf("not named from the debug file beside it")
		}
		if o.DebugFile() != p {
			t.Errorf("DebugFile %q, want %q", o.DebugFile(), p)
		}
	})
	t.Run("debuginfod", func(t *testing.T) {
		srv := debuginfodtest.Serve(t, served)
		srv.WaitFor(t, sp.BuildID, 60*time.Second)
		cache := t.TempDir()
		var reports []string
		f := &debuginfo.Finder{URLs: []string{srv.URL}, CacheDir: cache, Timeout: 5 * time.Second,
			Report: func(s string) { reports = append(reports, s) }}
		objs := &Objects{Load: LoadOptions{Debuginfo: f}}
		o := objs.Get(sp.Stripped)
		if !named(o, inside, debuginfodtest.StaticFunc) {
			t.Errorf("not named from debuginfod; reports %q\n%s", reports, srv.Log())
		}
		if want := debuginfo.CachePath(cache, sp.BuildID); o.DebugFile() != want {
			t.Errorf("DebugFile %q, want %q", o.DebugFile(), want)
		}
	})
	t.Run("debuginfod-down", func(t *testing.T) {
		var reports []string
		// A server that hangs, and counts who asks it.
		silent := debuginfodtest.Silent(t)
		down := silent.URL
		f := &debuginfo.Finder{URLs: []string{down}, CacheDir: t.TempDir(), Timeout: 200 * time.Millisecond,
			Report: func(s string) { reports = append(reports, s) }}
		o := LoadObjectWith(sp.Stripped, LoadOptions{Debuginfo: f})
		for i := 0; i < 100; i++ { // many misses, one lookup
			o.Symbol(inside + uint64(i%4))
		}
		if n := silent.Accepted(); n != 1 {
			t.Errorf("100 misses asked the server %d times, want once", n)
		}
		if !named(o, exported, debuginfodtest.ExportedFunc) {
			t.Errorf("the exported function is no longer named")
		}
		if len(reports) != 1 || !strings.Contains(reports[0], "debuginfod "+down+": ") {
			t.Errorf("reports %q", reports)
		}
	})
}

func named(o *Object, addr uint64, want string) bool {
	name, _, ok := o.Symbol(addr)
	return ok && name == want
}

// TestDebugFileCFI: a library built as musl is, its call frame information
// in .debug_frame alone, unwinds through its functions once stripped only
// from its separate debug file (beside it, or from a real debuginfod), and
// says its tables are thin without one.
func TestDebugFileCFI(t *testing.T) {
	dir := t.TempDir()
	src := manyFuncsLib(t, dir, 2*minThinFuncs, "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
	addr, size := debuginfodtest.SymbolAddr(t, src, debuginfodtest.StaticFunc)
	inside := addr + size/2
	covers := func(o *Object) bool {
		tab, err := o.Table(ArchX86_64)
		if err != nil {
			return false
		}
		_, ok := tab.Lookup(inside)
		return ok && o.frameAt(inside) != nil
	}
	if o := LoadObject(src); o.ThinCFI() || !covers(o) {
		t.Fatalf("the unstripped library: thin %v, covers %s: %v", o.ThinCFI(), debuginfodtest.StaticFunc, covers(o))
	}
	libDir := filepath.Join(dir, "lib")
	served := filepath.Join(dir, "served")
	sp := debuginfodtest.SplitDebug(t, src, filepath.Join(libDir, "libfake.so.1"), filepath.Join(served, "libfake.so.1.debug"))
	if o := LoadObject(sp.Stripped); !o.ThinCFI() || covers(o) {
		t.Fatalf("stripped, no debug file anywhere: thin %v, covers %v; want thin and not", o.ThinCFI(), covers(o))
	}
	t.Run("debuglink-beside", func(t *testing.T) {
		p := filepath.Join(libDir, "libfake.so.1.debug")
		b, _ := os.ReadFile(sp.Debug)
		os.WriteFile(p, b, 0o644)
		defer os.Remove(p)
		if o := LoadObject(sp.Stripped); o.ThinCFI() || !covers(o) {
			t.Errorf("debug file beside it: thin %v, covers %v", o.ThinCFI(), covers(o))
		}
	})
	t.Run("debuginfod", func(t *testing.T) {
		srv := debuginfodtest.Serve(t, served)
		srv.WaitFor(t, sp.BuildID, 60*time.Second)
		f := &debuginfo.Finder{URLs: []string{srv.URL}, CacheDir: t.TempDir(), Timeout: 5 * time.Second}
		o := LoadObjectWith(sp.Stripped, LoadOptions{Debuginfo: f, TableOnly: true})
		if o.ThinCFI() || !func() bool { tab, err := o.Table(ArchX86_64); return err == nil && len(tab.Rows) > 0 }() {
			t.Errorf("from debuginfod: thin %v\n%s", o.ThinCFI(), srv.Log())
		}
	})
}

// TestEntryNamed: a program's entry code is named _start when no function
// symbol covers it: musl's crt1 defines _start in assembly with no symbol
// type, and a stripped program names nothing there. A return address in
// it (the call into _start_c) is the bottom of the main thread.
func TestEntryNamed(t *testing.T) {
	cc := testskip.Command(t, "musl-gcc", "musl-tools")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.c")
	os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644)
	prog := filepath.Join(dir, "prog")
	if out, err := exec.Command(cc, "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("musl-gcc: %v\n%s", err, out)
	}
	stripped := filepath.Join(dir, "prog-stripped")
	if out, err := exec.Command("strip", "-o", stripped, prog).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	ef, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	entry := ef.Entry
	ef.Close()
	for _, p := range []string{prog, stripped} {
		o := LoadObject(p)
		if name, off, ok := o.Symbol(entry + 8); !ok || name != EntryName || off != 8 {
			t.Errorf("%s: entry+8 named %q+%d (%v), want %s+8", p, name, off, ok, EntryName)
		}
		if name, _, ok := o.Symbol(entry + maxEntryCode); ok && name == EntryName {
			t.Errorf("%s: %d bytes past the entry still named %s", p, maxEntryCode, name)
		}
	}
	// A library's entry point (musl's libc has one: _dlstart) is not a
	// program's start.
	lib := debuginfodtest.CLib(t, dir)
	lf, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if name, _, ok := LoadObject(lib).Symbol(lf.Entry + 1); ok && name == EntryName {
		t.Errorf("a library's entry %#x named %s", lf.Entry, name)
	}
}

// manyFuncsLib compiles CSource and n more exported functions into a
// shared library in dir, with DWARF and the gcc flags given.
func manyFuncsLib(t testing.TB, dir string, n int, flags ...string) string {
	t.Helper()
	var more strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&more, "int rubyperf_more_%d(int x) { return rubyperf_exported_entry(x + %d) * 3; }\n", i, i)
	}
	return debuginfodtest.CLibWith(t, dir, more.String(), flags...)
}
