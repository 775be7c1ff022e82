package rubystack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// maxDebugFileBytes bounds how much of a candidate debug file is hashed to
// check its .gnu_debuglink CRC.
const maxDebugFileBytes = 2 << 30

// findDebugFile looks for the separate debug file of e the way gdb does: by
// build-id under /usr/lib/debug/.build-id/, then by .gnu_debuglink next to the
// file, in its .debug/ directory and under /usr/lib/debug. root is the
// filesystem the file lives in ("/" or /proc/PID/root). It returns "" when
// there is none; a candidate that does not match the file is skipped.
func findDebugFile(e *elfFile, path, root string) string {
	if root == "" {
		root = "/"
	}
	id := e.buildID()
	if len(id) > 2 {
		p := filepath.Join(root, "/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
		if matchesBuildID(p, id) {
			return p
		}
	}
	link, crc, ok := e.debugLinkCRC()
	// The link comes from the file: it must be a plain name, never a path
	// that leaves the debug directories.
	if !ok || link != filepath.Base(link) || link == "." || link == ".." {
		return ""
	}
	dir := filepath.Dir(path) // the file's own directory, inside root
	for _, cand := range []string{
		filepath.Join(root, dir, link),
		filepath.Join(root, dir, ".debug", link),
		filepath.Join(root, "/usr/lib/debug", dir, link),
	} {
		if filepath.Clean(cand) == filepath.Clean(filepath.Join(root, path)) {
			continue
		}
		if id != "" && matchesBuildID(cand, id) {
			return cand
		}
		if fileCRC32(cand) == crc {
			return cand
		}
	}
	return ""
}

// debugLinkCRC returns the .gnu_debuglink name and its CRC32.
func (e *elfFile) debugLinkCRC() (string, uint32, bool) {
	s := e.f.Section(".gnu_debuglink")
	if s == nil || s.Size > maxNoteBytes {
		return "", 0, false
	}
	b, err := e.sectionData(s)
	if err != nil {
		return "", 0, false
	}
	name := e.debugLink()
	off := align4(uint64(len(name) + 1))
	if name == "" || off+4 > uint64(len(b)) {
		return "", 0, false
	}
	return name, e.f.ByteOrder.Uint32(b[off:]), true
}

func matchesBuildID(path, id string) bool {
	d, err := openELF(path)
	if err != nil {
		return false
	}
	defer d.Close()
	return d.buildID() == id
}

func fileCRC32(path string) uint32 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return 0
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.LimitReader(f, maxDebugFileBytes)); err != nil {
		return 0
	}
	return h.Sum32()
}

var errNotRuby = errors.New("no ruby_version symbol: not a Ruby executable or libruby")

// readVersion reads the ruby_version string (e.g. "3.3.8") that every Ruby
// exports.
func readVersion(e *elfFile, syms map[string]symbol) (Version, error) {
	s, ok := syms["ruby_version"]
	if !ok {
		return Version{}, errNotRuby
	}
	str, err := e.readCString(s.Value, 32)
	if err != nil {
		return Version{}, fmt.Errorf("ruby_version: %w", err)
	}
	return ParseVersion(str)
}

// le64 reads a little-endian word; callers check the length.
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
