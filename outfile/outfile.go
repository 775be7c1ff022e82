package outfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// File is an output being written: a temporary file beside Path until
// Commit renames it over Path.
type File struct {
	*os.File
	// Path is where the file goes.
	Path string
	// KeepOld renames a regular file already at Path to Path.old on
	// Commit, as perf record keeps perf.data.old.
	KeepOld bool
	placed  bool // renamed over Path
	closed  bool
}

// Create starts writing the file that goes to path, with permissions perm.
// It refuses a path that holds something a file must not replace: a
// directory, a FIFO, a socket, a device, or a regular file with other hard
// links (writing it would write theirs). A symbolic link is replaced, never
// followed.
func Create(path string, perm fs.FileMode) (*File, error) {
	if err := Check(path); err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary name means nothing to the user
		}
		return nil, fmt.Errorf("%s: cannot create a file in %s: %w", path, dir, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{File: f, Path: path}, nil
}

// Check says whether an output may go to path (see Create).
func Check(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	case st.Mode()&fs.ModeSymlink != 0:
		return nil
	case st.IsDir():
		return fmt.Errorf("%s: a directory: give a file's path", path)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s: a %s, not a regular file: rubyperf only replaces files (give another path, or - for stdout where a command has it)",
			path, typeName(st.Mode()))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		return fmt.Errorf("%s: a file with %d hard links: writing it would write the others; remove it or give another path", path, sys.Nlink)
	}
	return nil
}

// CheckKeepOld is Check for a file whose Place or Commit keeps what path
// holds as path.old (KeepOld): it also refuses when that move cannot be
// made, a directory at path.old, so that nothing is started for a file
// that cannot be placed.
func CheckKeepOld(path string) error {
	if err := Check(path); err != nil {
		return err
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		return nil // nothing to keep
	}
	old := path + ".old"
	if st, err := os.Lstat(old); err == nil && st.IsDir() {
		return fmt.Errorf("%s: a directory where the file %s replaces is to be kept: remove it, or give another path", old, path)
	}
	return nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// Place renames the file over Path now (Path.old keeps what was there
// when KeepOld is set); it stays open, and what is written after lands in
// the file at Path: a recording is in place from its start, so that
// whatever ends it leaves a file.
func (f *File) Place() error {
	if f.placed || f.closed {
		return fmt.Errorf("%s: placed or closed already", f.Path)
	}
	if err := f.place(); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

func (f *File) place() error {
	if f.KeepOld {
		if st, err := os.Lstat(f.Path); err == nil && st.Mode().IsRegular() {
			if err := os.Rename(f.Path, f.Path+".old"); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(f.File.Name(), f.Path); err != nil {
		return err
	}
	f.placed = true
	return nil
}

// Commit closes the file and places it if Place has not. After an error
// the file is removed, unless it was placed.
func (f *File) Commit() error {
	if f.closed {
		return fmt.Errorf("%s: closed already", f.Path)
	}
	f.closed = true
	err := f.File.Close()
	if err == nil && !f.placed {
		err = f.place()
	}
	if err != nil {
		if !f.placed {
			os.Remove(f.File.Name())
		}
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

// Abort closes the file and, unless it was placed, removes it, leaving
// Path as it was. It does nothing after Commit.
func (f *File) Abort() {
	if f.closed {
		return
	}
	f.closed = true
	f.File.Close()
	if !f.placed {
		os.Remove(f.File.Name())
	}
}
