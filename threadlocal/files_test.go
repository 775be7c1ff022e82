package threadlocal

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// TestFilesFind: Files.Find finds what Find finds, in each of two processes
// of one program, and the second process's files are served from what the
// first read: no new file is read for it.
func TestFilesFind(t *testing.T) {
	dir := build(t)
	hosts := []*host{startHost(t, dir), startHost(t, dir)}
	for _, h := range hosts {
		h.load(t)
	}
	var c Files
	for i, h := range hosts {
		mem := procMem{h.pid}
		before := len(c.infos)
		for _, p := range probes {
			want, err := Find(h.pid, mem, p.symbol)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Find(h.pid, mem, p.symbol)
			if err != nil {
				t.Fatalf("host %d, %s: %v", i, p.symbol, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("host %d, %s: Files.Find = %+v, Find = %+v", i, p.symbol, *got, *want)
			}
		}
		t.Logf("host %d: %d files remembered", i, len(c.infos))
		if i == 0 && len(c.infos) == 0 {
			t.Fatal("nothing remembered of the first host's files")
		}
		if i == 1 && len(c.infos) != before {
			t.Errorf("the second host read %d files again, all of them mapped by the first", len(c.infos)-before)
		}
	}
}

// TestFilesChanged: a file changed since it was read (here only its
// modification time) is read again, not served from what Files holds.
func TestFilesChanged(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libprobe.so")
	b, err := os.ReadFile(filepath.Join(build(t), "libprobe.so"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(lib)
	if err != nil {
		t.Fatal(err)
	}
	ino := inodeOf(t, st)
	var c Files
	first, err := readELFFile(lib, ino, "rubyperf_tls_probe", &c)
	if err != nil || first == nil {
		t.Fatalf("read: %v", err)
	}
	again, _ := readELFFile(lib, ino, "rubyperf_tls_probe", &c)
	if again != first || len(c.infos) != 1 {
		t.Fatalf("the same file was read again (%d entries)", len(c.infos))
	}
	later := st.ModTime().Add(time.Second)
	if err := os.Chtimes(lib, later, later); err != nil {
		t.Fatal(err)
	}
	changed, err := readELFFile(lib, ino, "rubyperf_tls_probe", &c)
	if err != nil || changed == first || len(c.infos) != 2 {
		t.Fatalf("a changed file was served from before (%v, %d entries)", err, len(c.infos))
	}
	// Not an ELF file: remembered as such.
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, []byte("not ELF"), 0o644)
	st, _ = os.Stat(junk)
	for range 2 {
		if info, err := readELFFile(junk, inodeOf(t, st), "x", &c); info != nil || err == nil {
			t.Fatalf("junk read as ELF: %v", err)
		}
	}
	if len(c.infos) != 3 {
		t.Errorf("%d entries, want 3 (the file twice, the junk once)", len(c.infos))
	}
}

func inodeOf(t *testing.T, st os.FileInfo) uint64 {
	t.Helper()
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no stat_t")
	}
	return sys.Ino
}
