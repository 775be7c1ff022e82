package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
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
