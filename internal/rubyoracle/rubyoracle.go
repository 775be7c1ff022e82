// Package rubyoracle builds testdata/ruby/oracle_ext, the C extension through
// which testdata/ruby/oracle.rb asks a Ruby for its own frames
// (rb_profile_frames) where Fiddle is missing: Ruby 4.0 made Fiddle a bundled
// gem, which offline source builds do not install.
//
// The extension is compiled with the Ruby's own headers and the compiler and
// flags its RbConfig names, into $RUBYPERF_CACHE/oracle-ext/KEY, where KEY
// hashes the compile line and the source: built once, reused by every test
// binary after, and never left behind in the temporary directory.
package rubyoracle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
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

// rbconfigScript prints what the compile needs, one value a line.
const rbconfigScript = `c = RbConfig::CONFIG
puts c["CC"], c["CFLAGS"], c["rubyhdrdir"], c["rubyarchhdrdir"], c["DLEXT"]`

func build(rubyExe string) (string, error) {
	src, err := sourcePath()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(rubyExe, "-rrbconfig", "-e", rbconfigScript).Output()
	if err != nil {
		return "", fmt.Errorf("rbconfig: %w", err)
	}
	v := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(v) != 5 {
		return "", fmt.Errorf("rbconfig: %d values, want 5", len(v))
	}
	cc, cflags, hdr, archHdr, dlext := v[0], v[1], v[2], v[3], v[4]
	if _, err := os.Stat(filepath.Join(hdr, "ruby.h")); err != nil {
		return "", fmt.Errorf("no Ruby headers: %w", err)
	}
	code, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("oracle extension: %w", err)
	}
	lib := "rubyperf_oracle." + dlext
	// The compile line names the Ruby's headers, compiler and flags; the
	// output path is left out of the key so the key does not depend on it.
	key := sha256.New()
	fmt.Fprintf(key, "%s\x00%s\x00%s\x00%s\x00%s\x00", cc, cflags, archHdr, hdr, lib)
	key.Write(code)
	dir := filepath.Join(testruby.Cache(), "oracle-ext", hex.EncodeToString(key.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	// Built aside and renamed into place: test binaries run in parallel.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// No -lruby: the extension's undefined symbols resolve against the
	// running interpreter (libruby, or a static ruby's exported C API).
	line := fmt.Sprintf("%s %s -fPIC -shared -I%q -I%q -o %q %q", cc, cflags, archHdr, hdr, filepath.Join(tmp, lib), src)
	if msg, err := exec.Command("sh", "-c", line).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", line, err, msg)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, lib)); serr == nil {
			return dir, nil // another test binary won the race
		}
		return "", fmt.Errorf("oracle extension: %w", err)
	}
	return dir, nil
}

// sourcePath finds the C source from this file's place in the repository.
func sourcePath() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("oracle extension: cannot locate the repository")
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", filepath.FromSlash(Source))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("oracle extension: %w", err)
	}
	return p, nil
}
