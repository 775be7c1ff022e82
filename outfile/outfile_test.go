package outfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPlanted plants at an output's path what another user could in /tmp,
// and checks that nothing planted is written through: a link to a victim
// file is replaced and the victim untouched, a FIFO or device is refused
// without being opened (a FIFO's open would block), a hard link refused.
func TestPlanted(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(path string) error {
		f, err := Create(path, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteString("profile"); err != nil {
			t.Fatal(err)
		}
		return f.Commit()
	}
	checkVictim := func(what string) {
		if b, _ := os.ReadFile(victim); string(b) != "precious" {
			t.Errorf("%s: the victim now holds %q", what, b)
		}
	}

	link := filepath.Join(dir, "symlink.svg")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := write(link); err != nil {
		t.Errorf("symbolic link: %v", err)
	}
	checkVictim("symbolic link")
	if st, err := os.Lstat(link); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
		t.Errorf("symbolic link: the path is now %v (%v), want a regular file, mode 0644", st.Mode(), err)
	}

	hard := filepath.Join(dir, "hard.svg")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	if err := write(hard); err == nil || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("hard link: %v, want a refusal", err)
	}
	checkVictim("hard link")

	fifo := filepath.Join(dir, "fifo.svg")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := write(fifo); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("FIFO: %v, want a refusal", err)
	}
	if err := write("/dev/null"); err == nil || !strings.Contains(err.Error(), "character device") {
		t.Errorf("/dev/null: %v, want a refusal", err)
	}
	if st, err := os.Stat("/dev/null"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v %v", st.Mode(), err)
	}
	if err := write(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v, want a refusal", err)
	}
	// Nothing is left behind by the refusals, and the written files are whole.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestKeepOldAndAbort: a recording keeps the file it replaces as .old; an
// aborted output leaves the path as it was and no temporary file.
func TestKeepOldAndAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rubyperf.data")
	for _, content := range []string{"first", "second"} {
		f, err := Create(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.KeepOld = true
		f.WriteString(content)
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "second" {
		t.Errorf("path holds %q", b)
	}
	if b, _ := os.ReadFile(path + ".old"); string(b) != "first" {
		t.Errorf("path.old holds %q", b)
	}
	f, err := Create(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("half")
	f.Abort()
	f.Abort()
	if b, _ := os.ReadFile(path); string(b) != "second" {
		t.Errorf("after Abort, path holds %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("after Abort: %d entries, want the file and its .old", len(entries))
	}
	if err := f.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}
}

// TestCheckKeepOld: a directory planted at path.old is refused up front
// when there is a file at path to keep, and only then.
func TestCheckKeepOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rubyperf.data")
	if err := os.MkdirAll(filepath.Join(path+".old", "planted"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckKeepOld(path); err != nil {
		t.Errorf("no file at path yet: %v", err)
	}
	if err := os.WriteFile(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := CheckKeepOld(path)
	if err == nil || !strings.Contains(err.Error(), path+".old: a directory") {
		t.Errorf("CheckKeepOld = %v, want a refusal naming %s.old", err, path)
	}
	os.RemoveAll(path + ".old")
	if err := os.WriteFile(path+".old", []byte("older"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckKeepOld(path); err != nil {
		t.Errorf("a regular path.old: %v", err)
	}
}
