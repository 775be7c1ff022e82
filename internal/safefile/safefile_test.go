package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRefusesWhatIsNotARegularFile: a FIFO (which a plain open waits on for
// a writer, forever), a device, a directory and a socket are refused at
// once, in one line naming the path and what it is; a regular file, or a
// link to one, opens. OpenNoFollow refuses the link itself.
func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	fifoLink := filepath.Join(dir, "fifo-link")
	if err := os.Symlink(fifo, fifoLink); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, kind string
		open       func(string) (*os.File, error)
	}{
		{fifo, "a named pipe (FIFO)", Open},
		{fifoLink, "a named pipe (FIFO)", Open},
		{"/dev/null", "a character device", Open},
		{"/dev/tty", "a character device", Open},
		{dir, "a directory", Open},
		{sock, "a socket", Open},
		{link, "a symbolic link", OpenNoFollow},
		{fifo, "a named pipe (FIFO)", OpenNoFollow},
	} {
		done := make(chan error, 1)
		go func() {
			f, err := c.open(c.path)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			want := c.path + ": it is " + c.kind + ", not a regular file"
			if err == nil || err.Error() != want || !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want %q (ErrNotRegular)", c.path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: open still blocked after 5 s", c.path)
		}
	}
	for _, p := range []string{regular, link} {
		f, err := Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		f.Close()
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want os.ErrNotExist", err)
	}
}

// TestReadAllBound: ReadAll reads a file of up to limit bytes whole and
// refuses a larger one, by its size, in one line naming it and the bound.
func TestReadAllBound(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadAll(p, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadAll(10 bytes, limit 10) = %q, %v", b, err)
	}
	// A sparse file claims 1 TiB: refused before a byte is read.
	if err := os.Truncate(p, 1<<40); err != nil {
		t.Fatal(err)
	}
	b, err := ReadAll(p, 9)
	if err == nil || b != nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "over 9 bytes") {
		t.Errorf("ReadAll(1 TiB, limit 9) = %d bytes, %v; want a refusal naming the file and the bound", len(b), err)
	}
}
