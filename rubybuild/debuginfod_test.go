package rubybuild

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

// debuginfodFixture splits src into a stripped copy inside a fresh root and
// a debug file served by a real debuginfod.
type debuginfodFixture struct {
	root, inRoot, stripped string
	split                  debuginfodtest.Split
	srv                    *debuginfodtest.Server
}

func serveSplit(t *testing.T, src, name string) debuginfodFixture {
	t.Helper()
	root := t.TempDir()
	inRoot := "/usr/lib/x86_64-linux-gnu/" + name
	served := t.TempDir()
	sp := debuginfodtest.SplitDebug(t, src, filepath.Join(root, inRoot), filepath.Join(served, name+".debug"))
	srv := debuginfodtest.Serve(t, served)
	srv.WaitFor(t, sp.BuildID, 60*time.Second)
	return debuginfodFixture{root: root, inRoot: inRoot, stripped: sp.Stripped, split: sp, srv: srv}
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) { l.mu.Lock(); l.l = append(l.l, s); l.mu.Unlock() }
func (l *lines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

// TestDebuginfodOpenBinary: a stripped Ruby whose debug file only a
// debuginfod server has is opened with that file's DWARF; with the server
// down the open still works, and the miss is one line, within the timeout.
func TestDebuginfodOpenBinary(t *testing.T) {
	check := func(t *testing.T, src, name string, wantLayout bool) {
		fx := serveSplit(t, src, name)
		cache := t.TempDir()
		rep := &lines{}
		f := &debuginfo.Finder{URLs: []string{fx.srv.URL}, CacheDir: cache, Timeout: 5 * time.Second, Report: rep.add}
		start := time.Now()
		b, err := OpenBinary(fx.stripped, OpenOptions{Root: fx.root, Debuginfo: f, MappedAs: fx.inRoot})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		t.Logf("OpenBinary with a debuginfod download: %s", time.Since(start))
		want := debuginfo.CachePath(cache, fx.split.BuildID)
		if b.DebugFile != want {
			t.Fatalf("debug file %q, want the downloaded %q; reports %q\n%s", b.DebugFile, want, rep.get(), fx.srv.Log())
		}
		if wantLayout {
			l, err := b.Layout()
			if err != nil {
				t.Fatal(err)
			}
			if l.Source != "dwarf:"+want {
				t.Errorf("layout from %q, want dwarf:%s", l.Source, want)
			}
		}
		if len(rep.get()) != 0 {
			t.Errorf("reports %q", rep.get())
		}

		// The server down: the open works as without debug info, and says
		// once what it missed, within the timeout.
		silent := debuginfodtest.Silent(t)
		down := silent.URL
		rep = &lines{}
		f = &debuginfo.Finder{URLs: []string{down}, CacheDir: t.TempDir(), Timeout: time.Second, Report: rep.add}
		start = time.Now()
		b2, err := OpenBinary(fx.stripped, OpenOptions{Root: fx.root, Debuginfo: f, MappedAs: fx.inRoot})
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if took > 2*time.Second {
			t.Errorf("open with a hanging server took %s, timeout 1s", took)
		}
		if b2.DebugFile != "" {
			t.Errorf("debug file %q with the server down", b2.DebugFile)
		}
		got := rep.get()
		if len(got) != 1 || !strings.HasPrefix(got[0], "no debug info for "+fx.inRoot+" (build-id "+fx.split.BuildID+"): debuginfod "+down+": ") {
			t.Errorf("reports %q", got)
		}
		if wantLayout {
			if l, err := b2.Layout(); err == nil && !strings.HasPrefix(l.Source, "table:") {
				t.Errorf("layout from %q with no debug file", l.Source)
			}
		}
		// A second open in the same run asks nothing and says nothing more.
		asked := silent.Accepted()
		b3, err := OpenBinary(fx.stripped, OpenOptions{Root: fx.root, Debuginfo: f, MappedAs: fx.inRoot})
		if err == nil {
			b3.Close()
		}
		if n := silent.Accepted(); n != asked || len(rep.get()) != 1 {
			t.Errorf("second open: %d connections to the server after %d, reports %q", n, asked, rep.get())
		}
	}
	t.Run("c-library", func(t *testing.T) {
		// A library with Ruby's version symbol and DWARF, built here: the
		// lookup does not depend on the test Rubies.
		check(t, debuginfodtest.CLib(t, t.TempDir()), "libfake.so.1", false)
	})
	t.Run("ruby", func(t *testing.T) {
		r := testruby.Get(t, "source-3.1-shared")
		if !r.DWARF {
			t.Fatalf("%s has no DWARF: its manifest says so", r.Name)
		}
		check(t, r.VM, filepath.Base(r.VM), true)
	})
}
