// Package rubyext compiles the tests' small C extensions (testdata/ruby/*_ext)
// against a test Ruby: with the Ruby's own headers and the compiler and
// flags its RbConfig names, into $RUBYPERF_CACHE/KIND/KEY, where KEY hashes
// the compile line and the source, so each is built once and reused by every
// test binary after, and never left behind in a temporary directory.
package rubyext

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// ErrNoHeaders: the Ruby has no development headers (Debian's binary
// Rubies, unpacked without their -dev packages), so nothing can be built.
var ErrNoHeaders = errors.New("no Ruby headers")

// rbconfigScript prints what the compile needs, one value a line.
const rbconfigScript = `c = RbConfig::CONFIG
puts c["CC"], c["CFLAGS"], c["rubyhdrdir"], c["rubyarchhdrdir"], c["DLEXT"]`

// Compile builds the C source src (relative to the repository root) for
// the Ruby rubyExe as the shared object NAME.DLEXT, under kind in the
// cache, and returns its path.
func Compile(rubyExe, src, name, kind string) (string, error) {
	path, err := testruby.RepoPath(src)
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
		return "", fmt.Errorf("%w: %v", ErrNoHeaders, err)
	}
	code, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lib := name + "." + dlext
	// The key covers what the compile depends on, not where it writes.
	key := sha256.New()
	fmt.Fprintf(key, "%s\x00%s\x00%s\x00%s\x00%s\x00", cc, cflags, archHdr, hdr, lib)
	key.Write(code)
	dir := filepath.Join(testruby.Cache(), kind, hex.EncodeToString(key.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
		return filepath.Join(dir, lib), nil
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
	line := fmt.Sprintf("%s %s -fPIC -shared -I%q -I%q -o %q %q", cc, cflags, archHdr, hdr, filepath.Join(tmp, lib), path)
	if msg, err := exec.Command("sh", "-c", line).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", line, err, msg)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, lib)); serr == nil {
			return filepath.Join(dir, lib), nil // another test binary won the race
		}
		return "", err
	}
	return filepath.Join(dir, lib), nil
}
