package main

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/recording"
)

// TestDebuginfodMissLine: with DEBUGINFOD_URLS naming a server that is
// down, a command still runs and says in one line on stderr what it missed.
func TestDebuginfodMissLine(t *testing.T) {
	dir := t.TempDir()
	src := debuginfodtest.CLib(t, dir)
	sp := debuginfodtest.SplitDebug(t, src, filepath.Join(dir, "lib", "libfake.so.1"), filepath.Join(dir, "elsewhere", "libfake.so.1.debug"))
	down := debuginfodtest.Refusing(t)
	t.Setenv("DEBUGINFOD_URLS", down)
	t.Setenv("DEBUGINFOD_CACHE_PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	start := time.Now()
	run([]string{"offsets", sp.Stripped}, &stdout, &stderr)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("offsets with a server down took %s", took)
	}
	want := "rubyperf: no debug info for " + sp.Stripped + " (build-id " + sp.BuildID + "): debuginfod " + down + ": connection refused\n"
	if n := strings.Count(stderr.String(), want); n != 1 {
		t.Errorf("stderr has the miss line %d times, want once:\n%s\nwant: %s", n, stderr.String(), want)
	}
}

// StrippedRuby is a test Ruby whose libruby is a stripped copy (no DWARF, no
// .symtab, as distributions ship it) loaded from Dir, with its debug file
// served by a real debuginfod at Server.URL.
type StrippedRuby struct {
	testruby.Ruby
	Args   []string // run Exe with Args, then the script and its arguments
	Lib    string   // the stripped libruby
	Split  debuginfodtest.Split
	Server *debuginfodtest.Server
}

// startStrippedRuby makes a StrippedRuby of a shared test Ruby with DWARF and
// starts it on args.
func startStrippedRuby(t *testing.T, flavor string, args ...string) (*StrippedRuby, int) {
	t.Helper()
	r := testruby.Get(t, flavor)
	if !r.DWARF || !r.Symtab {
		t.Fatalf("%s has no DWARF and .symtab to split off: its manifest says so", r.Name)
	}
	soname := sonameOf(t, r.VM)
	dir := t.TempDir()
	served := t.TempDir()
	sp := debuginfodtest.SplitDebug(t, r.VM, filepath.Join(dir, soname), filepath.Join(served, soname+".debug"))
	srv := debuginfodtest.Serve(t, served)
	srv.WaitFor(t, sp.BuildID, 60*time.Second)
	// The dynamic loader run directly: its --inhibit-rpath makes the
	// library path win over the build's RPATH/RUNPATH.
	ldso := "/lib64/ld-linux-x86-64.so.2"
	sr := &StrippedRuby{Ruby: r, Lib: sp.Stripped, Split: sp, Server: srv,
		Args: []string{"--inhibit-rpath", r.Exe, "--library-path", dir, r.Exe}}
	run := r
	run.Exe = ldso
	cmd := testruby.Start(t, run, append(sr.Args, args...)...)
	maps, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/maps")
	if !strings.Contains(string(maps), sp.Stripped) {
		t.Fatalf("the loader did not map the stripped copy %s", sp.Stripped)
	}
	return sr, cmd.Process.Pid
}

func sonameOf(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) != 1 {
		t.Fatalf("%s has no SONAME (a static Ruby?): %v", path, err)
	}
	return names[0]
}

// staticFuncs are the functions only a .symtab names: local ones, absent
// from .dynsym.
func staticFuncs(t *testing.T, debug, stripped string) map[string]bool {
	t.Helper()
	d, err := elf.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	syms, err := d.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	s, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dyn, _ := s.DynamicSymbols()
	exported := map[string]bool{}
	for _, x := range dyn {
		exported[x.Name] = true
	}
	out := map[string]bool{}
	for _, x := range syms {
		if elf.ST_TYPE(x.Info) == elf.STT_FUNC && elf.ST_BIND(x.Info) == elf.STB_LOCAL && !exported[x.Name] {
			out[x.Name] = true
		}
	}
	return out
}

// TestReportStrippedRubyDebuginfod: record a Ruby whose libruby is
// stripped; report names libruby's static functions once debuginfod serves
// the debug file, and cannot without it.
func TestReportStrippedRubyDebuginfod(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	sr, pid := startStrippedRuby(t, "source-3.1-shared", workload(t), "30")
	file := filepath.Join(t.TempDir(), "rubyperf.data")
	if _, err := recording.Record(context.Background(), recording.Options{PIDs: []int{pid}, Frequency: 299,
		Duration: 2 * time.Second, Output: file}); err != nil {
		t.Fatal(err)
	}
	statics := staticFuncs(t, sr.Split.Debug, sr.Lib)
	report := func() (named []string, stderr string) {
		var out, errb bytes.Buffer
		if code := run([]string{"report", "--native", "-n", "500", "-i", file}, &out, &errb); code != 0 {
			t.Fatalf("report exit %d: %s", code, errb.String())
		}
		// Rows of the native functions table: self%, total%, name, object.
		native := false
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "## ") {
				native = strings.HasPrefix(l, "## native")
			}
			f := strings.Fields(l)
			if native && len(f) == 4 && f[3] == filepath.Base(sr.Lib) && statics[f[2]] {
				named = append(named, f[2])
			}
		}
		return named, errb.String()
	}
	t.Setenv("DEBUGINFOD_CACHE_PATH", t.TempDir())
	t.Setenv("DEBUGINFOD_URLS", "")
	if named, _ := report(); len(named) != 0 {
		t.Fatalf("static functions named without a debug file: %q", named)
	}
	t.Setenv("DEBUGINFOD_URLS", sr.Server.URL)
	named, stderr := report()
	if len(named) == 0 {
		t.Errorf("no static libruby function named with debuginfod serving the debug file; stderr: %s", stderr)
	}
	t.Logf("static functions named: %q", named)
}
