package perfmap

import (
	"os"
	"testing"
)

// TestWriteSyntheticAgain: writing the same entries again (the same
// recording injected twice) returns the base they are at and leaves the
// file as it was; entries that differ, or a span holding a stranger, get a
// range of their own.
func TestWriteSyntheticAgain(t *testing.T) {
	dir := t.TempDir()
	path := Path(dir, testPid)
	yjit := "7f8a3c00a000 40 [JIT] Integer#times\n"
	if err := os.WriteFile(path, []byte(yjit), 0o644); err != nil {
		t.Fatal(err)
	}
	in := frames("", 50, 16)
	_, base, err := WriteSynthetic(dir, testPid, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, again := range [][]Entry{in, in[:20]} {
		_, b, err := WriteSynthetic(dir, testPid, again, nil)
		if err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(path)
		if b != base || string(after) != string(before) {
			t.Fatalf("%d entries again: base %#x (want %#x), file grew from %d to %d bytes", len(again), b, base, len(before), len(after))
		}
	}

	// One name differs: not what the file holds.
	other := frames("", 50, 16)
	other[7].Name = "Object#other foo.rb:8"
	_, b, err := WriteSynthetic(dir, testPid, other, nil)
	if err != nil || b == base {
		t.Fatalf("changed entries: base %#x (first %#x), %v", b, base, err)
	}

	// A stranger inside the span the entries cover: a new range.
	fresh := frames("fresh ", 4, 16)
	fresh[3].Start = 64 // leaves [48, 64) free for the stranger
	_, fb, err := WriteSynthetic(dir, testPid, fresh, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir, testPid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Append([]Entry{{fb + 48, 16, "stranger here"}}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, b, err := WriteSynthetic(dir, testPid, fresh, nil); err != nil || b == fb {
		t.Fatalf("entries whose span holds a stranger: base %#x (first %#x), %v", b, fb, err)
	}
}
