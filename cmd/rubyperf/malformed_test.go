package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestMalformedInputs: every command that reads a perf.data, and offsets
// reading an ELF file, turns each file of the malformed corpora down in one
// line naming the file, exit status 1, or reads what it can (exit 0): never
// a crash, never a hang.
func TestMalformedInputs(t *testing.T) {
	datas, _ := filepath.Glob("../../perfdata/testdata/malformed/*.data")
	elfs, _ := filepath.Glob("../../rubybuild/testdata/malformed/*.so")
	if len(datas) == 0 || len(elfs) == 0 {
		t.Fatalf("malformed corpora missing: %d perf.data, %d ELF files", len(datas), len(elfs))
	}
	check := func(t *testing.T, file string, args []string) (refused bool) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		msg := strings.TrimSpace(stderr.String())
		switch {
		case code == 0:
			return false
		case code == 1 && !strings.Contains(msg, "\n") && strings.Contains(msg, file):
			return true
		default:
			t.Errorf("%v: exit %d: %q (want 0, or 1 and one line naming %s)", args, code, msg, file)
			return true
		}
	}
	refused := 0
	for _, file := range datas {
		out := filepath.Join(t.TempDir(), "out")
		for _, args := range [][]string{
			{"script", "-i", file},
			{"report", "-i", file},
			{"convert", "-i", file, "-f", "folded", "-o", out},
			{"inject", "-i", file, "-o", out, "--map-dir", t.TempDir()},
		} {
			if check(t, file, args) {
				refused++
			}
		}
	}
	for _, file := range elfs {
		if !check(t, file, []string{"offsets", file}) {
			t.Errorf("offsets %s: exit 0 for a broken ELF file", file)
		}
	}
	t.Logf("%d perf.data files: %d of %d runs refused; %d ELF files refused", len(datas), refused, 4*len(datas), len(elfs))
}
