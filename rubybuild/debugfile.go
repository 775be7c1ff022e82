package rubybuild

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rubyperf/rubyperf/debuginfo"
)

// findDebugFile finds the separate debug file of e through package
// debuginfo: the explicit file, then the build-id tree, .gnu_debuglink, and
// debuginfod (only when e has no DWARF of its own). path is e's path inside
// opts.Root. It returns "" when there is none; the error is for an explicit
// file that does not match.
func findDebugFile(e *elfFile, path string, opts OpenOptions) (string, error) {
	id := debuginfo.ReadIdentity(e.f)
	return opts.Debuginfo.Find(debuginfo.Request{
		ID:       id,
		Name:     path,
		Root:     opts.Root,
		Explicit: opts.DebugFile,
		NoRemote: id.HasDWARF,
	})
}

// ErrNotRuby says a file is no Ruby build: it exports no ruby_version.
var ErrNotRuby = errors.New("no ruby_version symbol: not a Ruby executable or libruby")

// readVersion reads the ruby_version string (e.g. "3.3.8") that every Ruby
// exports.
func readVersion(e *elfFile, syms map[string]symbol) (Version, error) {
	s, ok := syms["ruby_version"]
	if !ok {
		return Version{}, ErrNotRuby
	}
	str, err := e.readCString(s.Value, 32)
	if err != nil {
		return Version{}, fmt.Errorf("ruby_version: %w", err)
	}
	return ParseVersion(str)
}

// le64 reads a little-endian word; callers check the length.
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
