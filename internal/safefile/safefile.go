package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular is what every refusal of a path that is not a regular file
// wraps (errors.Is).
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError refuses Path, which is Kind (Kind names it).
type NotRegularError struct {
	Path string
	Kind string
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: it is %s, not a regular file", e.Path, e.Kind)
}

// Is makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// Open opens path read-only, following symbolic links, and returns it only
// if it is a regular file.
func Open(path string) (*os.File, error) {
	f, _, err := open(path, 0)
	return f, err
}

// OpenStat is Open that also returns what the opened file's fstat said
// (its size, its inode, its owner), which Open reads anyway.
func OpenStat(path string) (*os.File, os.FileInfo, error) { return open(path, 0) }

// OpenNoFollow is Open refusing a symbolic link at path itself (its
// directories may still be links).
func OpenNoFollow(path string) (*os.File, error) {
	f, _, err := open(path, syscall.O_NOFOLLOW)
	return f, err
}

func open(path string, extra int) (*os.File, os.FileInfo, error) {
	// Refused before opening where the path names something else already:
	// opening a device can act (a tape rewinds, a terminal is taken).
	stat := os.Stat
	if extra&syscall.O_NOFOLLOW != 0 {
		stat = os.Lstat
	}
	if st, err := stat(path); err == nil {
		if kind := kindOf(st); kind != "" {
			return nil, nil, &NotRegularError{path, kind}
		}
	}
	// O_NONBLOCK: what the path names may have changed since; an open of a
	// FIFO without it waits for a writer, forever. os adds O_CLOEXEC.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|extra, 0)
	if err != nil {
		if extra&syscall.O_NOFOLLOW != 0 && errors.Is(err, syscall.ELOOP) {
			return nil, nil, &NotRegularError{path, Kind(syscall.S_IFLNK)}
		}
		return nil, nil, err
	}
	st, err := check(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// Check refuses an opened file that is not a regular file, for a caller
// that opened it some other way (openat2, say) but with O_NONBLOCK.
func Check(f *os.File) error {
	_, err := check(f)
	return err
}

// check is Check returning the file's fstat.
func check(f *os.File) (os.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if kind := kindOf(st); kind != "" {
		return nil, &NotRegularError{f.Name(), kind}
	}
	return st, nil
}

// ReadAll reads the regular file at path whole, refusing one over limit
// bytes (before reading, by its size, and while reading, should it grow).
func ReadAll(path string, limit int64) ([]byte, error) { return ReadOwned(path, limit, -1) }

// ReadOwned is ReadAll refusing a file that user uid does not own (any
// owner when uid is negative): the file opened, not what the path names
// before or after.
func ReadOwned(path string, limit int64, uid int) ([]byte, error) {
	f, st, err := OpenStat(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if sys, ok := st.Sys().(*syscall.Stat_t); uid >= 0 && (!ok || int(sys.Uid) != uid) {
		owner := "unknown"
		if ok {
			owner = fmt.Sprint(sys.Uid)
		}
		return nil, fmt.Errorf("%s: owned by uid %s, not uid %d: not trusted", path, owner, uid)
	}
	if st.Size() > limit {
		return nil, tooBig(path, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, tooBig(path, limit)
	}
	return b, nil
}

func tooBig(path string, limit int64) error {
	return fmt.Errorf("%s: over %d bytes, the most this file may hold; not read", path, limit)
}

// Kind names a file type (the S_IFMT bits of a stat's mode) other than a
// regular file: "a named pipe (FIFO)", "a directory"...; "" for a regular
// file.
func Kind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return ""
	case syscall.S_IFLNK:
		return "a symbolic link"
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFIFO:
		return "a named pipe (FIFO)"
	case syscall.S_IFSOCK:
		return "a socket"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	}
	return "of unknown type"
}

// kindOf is Kind of what st describes.
func kindOf(st os.FileInfo) string {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return Kind(sys.Mode)
	}
	if st.Mode().IsRegular() {
		return ""
	}
	return "of unknown type"
}
