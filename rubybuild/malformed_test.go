package rubybuild

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateMalformed = flag.Bool("update", false, "rewrite testdata/malformed from the malformations")

// malformedDir holds ELF files broken on purpose, one way each: regression
// inputs of FuzzOpenBinary and of `rubyperf offsets` (one-line errors,
// never a crash), made from testdata/fakeruby.so by the malformations below.
const malformedDir = "testdata/malformed"

// elfMalformations break one field of an ELF64 header (Elf64_Ehdr offsets)
// or of its section headers.
var elfMalformations = map[string]func(b []byte) []byte{
	"empty":            func(b []byte) []byte { return nil },
	"ident-only":       func(b []byte) []byte { return b[:16] },
	"header-only":      func(b []byte) []byte { return b[:64] },
	"half":             func(b []byte) []byte { return b[:len(b)/2] },
	"class-32":         func(b []byte) []byte { b[4] = 1; return b }, // EI_CLASS
	"big-endian":       func(b []byte) []byte { b[5] = 2; return b }, // EI_DATA
	"phoff-past-eof":   func(b []byte) []byte { binary.LittleEndian.PutUint64(b[32:], 1<<40); return b },
	"shoff-past-eof":   func(b []byte) []byte { binary.LittleEndian.PutUint64(b[40:], 1<<40); return b },
	"shentsize-zero":   func(b []byte) []byte { binary.LittleEndian.PutUint16(b[58:], 0); return b },
	"shnum-max":        func(b []byte) []byte { binary.LittleEndian.PutUint16(b[60:], 0xffff); return b },
	"shstrndx-invalid": func(b []byte) []byte { binary.LittleEndian.PutUint16(b[62:], 0xfffe); return b },
	"phnum-max":        func(b []byte) []byte { binary.LittleEndian.PutUint16(b[56:], 0xffff); return b },
	// Every section's offset and size past the end of the file.
	"sections-past-eof": func(b []byte) []byte { return eachSection(b, 24, 1<<40, 32, 1<<40) },
	// Every section's size huge, offsets kept.
	"sections-huge": func(b []byte) []byte { return eachSection(b, 32, 1<<62, -1, 0) },
	// Every section's link (to its string table) out of range.
	"links-invalid": func(b []byte) []byte {
		shoff, n := binary.LittleEndian.Uint64(b[40:]), int(binary.LittleEndian.Uint16(b[60:]))
		for i := 0; i < n && int(shoff)+(i+1)*64 <= len(b); i++ {
			binary.LittleEndian.PutUint32(b[int(shoff)+i*64+40:], 0xfff0) // sh_link
		}
		return b
	},
}

// eachSection sets two 64-bit fields (offsets in Elf64_Shdr; -1: none)
// of every section header but the null one.
func eachSection(b []byte, f1 int, v1 uint64, f2 int, v2 uint64) []byte {
	shoff, n := binary.LittleEndian.Uint64(b[40:]), int(binary.LittleEndian.Uint16(b[60:]))
	for i := 1; i < n && int(shoff)+(i+1)*64 <= len(b); i++ {
		h := b[int(shoff)+i*64:]
		binary.LittleEndian.PutUint64(h[f1:], v1)
		if f2 >= 0 {
			binary.LittleEndian.PutUint64(h[f2:], v2)
		}
	}
	return b
}

func malformedELFs(t testing.TB) map[string][]byte {
	base, err := os.ReadFile("testdata/fakeruby.so")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, m := range elfMalformations {
		out["fakeruby-"+name+".so"] = m(append([]byte(nil), base...))
	}
	return out
}

// TestMalformedCorpus: the committed corpus is what the malformations make,
// and opening each file and reading its layout and anchors returns errors,
// never panics.
func TestMalformedCorpus(t *testing.T) {
	corpus := malformedELFs(t)
	if *updateMalformed {
		os.RemoveAll(malformedDir)
		if err := os.MkdirAll(malformedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range corpus {
			if err := os.WriteFile(filepath.Join(malformedDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(malformedDir, "*.so"))
	if len(files) != len(corpus) {
		t.Fatalf("%d files in %s, the malformations make %d: run go test -run TestMalformedCorpus -update", len(files), malformedDir, len(corpus))
	}
	for name, want := range corpus {
		path := filepath.Join(malformedDir, name)
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: stale or missing (%v): run go test -run TestMalformedCorpus -update", name, err)
			continue
		}
		b, err := OpenBinary(path, OpenOptions{Root: t.TempDir()})
		if err != nil {
			continue
		}
		l, _ := b.Layout()
		b.Anchors(l)
		b.Close()
	}
}
