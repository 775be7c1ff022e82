// Package rubyoracle builds testdata/ruby/oracle_ext, the C extension through
// which a test asks a Ruby for its own answer: testdata/ruby/oracle.rb for its
// frames (rb_profile_frames) where Fiddle is missing (Ruby 4.0 made Fiddle a
// bundled gem, which offline source builds do not install), and the
// allocation tests for every object allocated, by method and by class
// (count_allocations: the allocator's own event, counted as stackprof's
// :object mode at interval 1 counts, on Rubies stackprof is not built for).
//
// The extension is compiled by internal/rubyext, into
// $RUBYPERF_CACHE/oracle-ext.
package rubyoracle

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rubyperf/rubyperf/internal/rubyext"
)

// Source is the extension's C source, relative to the repository root.
const Source = "testdata/ruby/oracle_ext/rubyperf_oracle.c"

type built struct {
	dir string
	err error
}

var (
	mu    sync.Mutex
	cache = map[string]built{}
)

// Args returns the interpreter arguments that put the extension on ruby's
// load path ("-I", DIR), or nil when it cannot be built for that Ruby (no
// headers installed, no compiler): oracle.rb then uses Fiddle. A Ruby that
// has neither fails later, when the oracle loads.
func Args(tb testing.TB, rubyExe string) []string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	b, ok := cache[rubyExe]
	if !ok {
		b.dir, b.err = build(rubyExe)
		cache[rubyExe] = b
	}
	if b.err != nil {
		tb.Logf("oracle extension not built for %s (oracle.rb falls back to Fiddle): %v", rubyExe, b.err)
		return nil
	}
	return []string{"-I", b.dir}
}

func build(rubyExe string) (string, error) {
	lib, err := rubyext.Compile(rubyExe, Source, "rubyperf_oracle", "oracle-ext")
	if err != nil {
		return "", fmt.Errorf("oracle extension: %w", err)
	}
	return filepath.Dir(lib), nil
}
