package debuginfo

import (
	"debug/elf"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func identityOf(t testing.TB, path string) Identity {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return ReadIdentity(f)
}

func unixMkfifo(p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return syscall.Mkfifo(p, 0o644)
}
