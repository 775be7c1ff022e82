// Package profilerstate builds testdata/ruby/profiler_state_ext, a C
// extension that publishes request labels the way the ruby-profiler gem
// does (a thread-local pointer ruby_profiler_state to the running fiber's
// key/value state), for tests of rubyperf's label reading; and locates
// testdata/ruby/labels.rb, the workload that labels requests with it.
//
// The extension is compiled by internal/rubyext, into
// $RUBYPERF_CACHE/profiler-state-ext.
package profilerstate

import (
	"errors"
	"sync"
	"testing"

	"github.com/rubyperf/rubyperf/internal/rubyext"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

const (
	// Source is the extension's C source, relative to the repository root.
	Source = "testdata/ruby/profiler_state_ext/rubyperf_profiler_state.c"
	// Script is the labelled workload, relative to the repository root.
	Script = "testdata/ruby/labels.rb"
	// Env names the variable through which Script is given the extension.
	Env = "RUBYPERF_PROFILER_STATE_SO"
	// Symbol is the thread-local pointer the extension publishes.
	Symbol = "ruby_profiler_state"
)

var builds sync.Map // Ruby executable -> func() (string, error)

// Build returns the path of the extension built for r, a test Ruby built
// from source (Debian's binaries come without headers), and fails the test
// when the build fails.
func Build(tb testing.TB, r testruby.Ruby) string {
	tb.Helper()
	f, _ := builds.LoadOrStore(r.Exe, sync.OnceValues(func() (string, error) { return build(r.Exe) }))
	lib, err := f.(func() (string, error))()
	if errors.Is(err, rubyext.ErrNoHeaders) {
		tb.Fatalf("profiler state extension for %s: %v: give Build a test Ruby built from source", r.Name, err)
	}
	if err != nil {
		tb.Fatalf("profiler state extension for %s: %v", r.Name, err)
	}
	return lib
}

// WorkloadPath is the absolute path of Script.
func WorkloadPath(tb testing.TB) string {
	tb.Helper()
	p, err := testruby.RepoPath(Script)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func build(rubyExe string) (string, error) {
	return rubyext.Compile(rubyExe, Source, "rubyperf_profiler_state", "profiler-state-ext")
}
