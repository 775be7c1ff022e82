package perfmap

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse: it must not panic, must return
// entries whose names hold no newline, no more entries than lines, and
// each entry that Append would write must read back the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		jitLines,
		"",
		"\n\n",
		"1000 10 abc",
		"0x 10 name\n",
		"ffffffffffffffff ffffffffffffffff max\r\n",
		"10000000000000000 1 overflow\n",
		"  7f00000000000000\t10\tblanks and tabs\n",
		"7f8a3c00a000 40 [JIT] Integer#times\n7f8a3c00a040 4",
		strings.Repeat("7", MaxLine+1) + " 10 long\n1000 10 after\n",
		"\x00\xff 10 binary\n",
	} {
		f.Add([]byte(s))
	}
	broken, _ := filepath.Glob("testdata/malformed/*.map")
	for _, path := range broken {
		if b, err := os.ReadFile(path); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("Parse of %d bytes in memory: %v", len(data), err)
		}
		if lines := bytes.Count(data, []byte("\n")) + 1; len(entries) > lines {
			t.Fatalf("%d entries from %d lines", len(entries), lines)
		}
		for _, e := range entries {
			if e.Name == "" || strings.ContainsAny(e.Name, "\n") {
				t.Fatalf("bad name %q", e.Name)
			}
			if checkEntries([]Entry{e}, 0) != nil {
				continue
			}
			back, err := Parse(strings.NewReader(e.String() + "\n"))
			if err != nil || len(back) != 1 || back[0] != e {
				t.Fatalf("%v reads back as %v, %v", e, back, err)
			}
		}
	})
}

// TestMalformedMaps: the committed malformed perf maps (FuzzParse's
// regression inputs) parse without error, keeping only well-formed lines.
func TestMalformedMaps(t *testing.T) {
	files, _ := filepath.Glob("testdata/malformed/*.map")
	if len(files) == 0 {
		t.Fatal("no malformed maps in testdata/malformed")
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := Parse(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for _, e := range entries {
			if e.Name == "" || strings.ContainsAny(e.Name, "\n\x00") {
				t.Errorf("%s: entry %+v", path, e)
			}
		}
	}
}
