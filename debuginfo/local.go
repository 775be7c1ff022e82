package debuginfo

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// maxCRCBytes bounds how much of a candidate debug file is hashed to check
// its .gnu_debuglink CRC.
const maxCRCBytes = 2 << 30

// DebugDir is where distributions install debug files.
const DebugDir = "/usr/lib/debug"

// findLocal looks for the debug file the way gdb does: by build-id under
// /usr/lib/debug/.build-id/ (in root, then on the host when root is another
// filesystem: the build-id decides), then by .gnu_debuglink beside the file,
// in its .debug/ directory and under /usr/lib/debug/. A candidate that does
// not match the file is skipped.
func findLocal(req Request) string {
	root, name := req.root(), req.name()
	if id := req.ID.BuildID; ValidBuildID(id) {
		rel := filepath.Join(DebugDir, ".build-id", id[:2], id[2:]+".debug")
		roots := []string{root}
		if root != "/" {
			roots = append(roots, "/")
		}
		for _, r := range roots {
			if p, f, err := openInRoot(r, rel); err == nil {
				ok := isDebugFileFor(f, id)
				f.Close()
				if ok {
					return p
				}
			}
		}
	}
	link := req.ID.Link
	if !plainName(link) || !filepath.IsAbs(name) {
		return ""
	}
	dir := filepath.Dir(filepath.Clean(name)) // the file's own directory, inside root
	self := filepath.Clean(name)
	for _, rel := range []string{
		filepath.Join(dir, link),
		filepath.Join(dir, ".debug", link),
		filepath.Join(DebugDir, dir, link),
	} {
		if rel == self {
			continue // a file linking to itself
		}
		p, f, err := openInRoot(root, rel)
		if err != nil {
			continue
		}
		ok := req.ID.BuildID != "" && isDebugFileFor(f, req.ID.BuildID)
		if !ok && (req.ID.BuildID == "" || fileBuildID(f) == "") {
			// No build-ids to compare: the CRC decides.
			if _, err := f.Seek(0, io.SeekStart); err == nil {
				crc, err := fileCRC32(f)
				ok = err == nil && crc == req.ID.LinkCRC
			}
		}
		f.Close()
		if ok {
			return p
		}
	}
	return ""
}

// openInRoot opens rel (an absolute path inside root) as a regular file,
// resolving every symlink inside root: a file from a container cannot lead
// outside its own filesystem. It returns the path as root/rel.
func openInRoot(root, rel string) (string, *os.File, error) {
	p := filepath.Join(root, rel)
	if root == "/" || root == "" {
		f, err := safefile.Open(p)
		return p, f, err
	}
	dir, err := os.Open(root)
	if err != nil {
		return p, nil, err
	}
	defer dir.Close()
	fd, err := unix.Openat2(int(dir.Fd()), strings.TrimPrefix(filepath.Clean(rel), "/"), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) { // kernels before 5.6
		f, err := safefile.Open(p)
		return p, f, err
	}
	if err != nil {
		return p, nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	if err := safefile.Check(f); err != nil {
		f.Close()
		return p, nil, err
	}
	return p, f, nil
}

// fileCRC32 is the CRC32 (IEEE) of f's contents, as .gnu_debuglink records
// it. Files over maxCRCBytes are refused.
func fileCRC32(f *os.File) (uint32, error) {
	h := crc32.NewIEEE()
	n, err := io.Copy(h, io.LimitReader(f, maxCRCBytes+1))
	if err != nil {
		return 0, err
	}
	if n > maxCRCBytes {
		return 0, fmt.Errorf("%s: over %d bytes", f.Name(), maxCRCBytes)
	}
	return h.Sum32(), nil
}

// explicitMatch opens an explicitly given debug file and reports its
// build-id.
func explicitBuildID(path string) (string, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return fileBuildID(f), nil
}
