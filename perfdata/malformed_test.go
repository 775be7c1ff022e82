package perfdata

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// malformedDir holds perf.data files broken on purpose, one way each: the
// regression inputs of FuzzReader, and of the commands' tests (one-line
// errors, never a crash). They are made from the files in testdata by
// malformations below; -update rewrites them.
const malformedDir = "testdata/malformed"

// A malformation breaks one thing of a valid file (offsets from
// perf_file_header: magic, size, attr_size, attrs, data, event_types,
// adds_features).
type malformation struct {
	name  string
	apply func(b []byte) []byte
}

func put64(off int, v uint64) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
}

// firstRecord is the offset of the data section's first record.
func firstRecord(b []byte) int { return int(binary.LittleEndian.Uint64(b[40:])) }

var malformations = []malformation{
	{"empty", func(b []byte) []byte { return nil }},
	{"magic-only", func(b []byte) []byte { return b[:8] }},
	{"header-cut", func(b []byte) []byte { return b[:60] }},
	{"half", func(b []byte) []byte { return b[:len(b)/2] }},
	{"bad-magic", func(b []byte) []byte { copy(b, "PERFILE1"); return b }},
	{"header-size-huge", put64(8, 1<<40)},
	{"attr-size-zero", put64(16, 0)},
	{"attrs-past-eof", func(b []byte) []byte { return put64(24, uint64(len(b))+4096)(b) }},
	{"attrs-size-huge", put64(32, 1<<62)},
	{"data-overlaps-header", put64(40, 0)},
	{"data-size-huge", put64(48, 1<<62)},
	{"data-past-eof", func(b []byte) []byte { return put64(48, uint64(len(b))*10)(b) }},
	{"record-size-zero", func(b []byte) []byte { binary.LittleEndian.PutUint16(b[firstRecord(b)+6:], 0); return b }},
	{"record-size-short", func(b []byte) []byte { binary.LittleEndian.PutUint16(b[firstRecord(b)+6:], 4); return b }},
	{"record-type-unknown", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[firstRecord(b):], 0xfffe); return b }},
	{"features-all", func(b []byte) []byte {
		for i := 72; i < 104; i++ {
			b[i] = 0xff
		}
		return b
	}},
	{"feature-table-past-eof", func(b []byte) []byte {
		// The feature sections' table follows the data section.
		end := binary.LittleEndian.Uint64(b[40:]) + binary.LittleEndian.Uint64(b[48:])
		if end+16 <= uint64(len(b)) {
			binary.LittleEndian.PutUint64(b[end:], 1<<50)
		}
		return b
	}},
	{"cut-in-features", func(b []byte) []byte {
		end := binary.LittleEndian.Uint64(b[40:]) + binary.LittleEndian.Uint64(b[48:])
		if end+8 < uint64(len(b)) {
			return b[:end+8]
		}
		return b
	}},
}

// malformedCorpus is every malformation of two valid files in testdata.
func malformedCorpus(t testing.TB) map[string][]byte {
	// One file of ours and one of perf's (file mode: the header's offsets
	// are what the malformations break).
	bases := []string{"testdata/writer.data", "testdata/perf-fp.data"}
	out := map[string][]byte{}
	for _, base := range bases {
		b, err := os.ReadFile(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range malformations {
			name := filepath.Base(base[:len(base)-len(".data")]) + "-" + m.name + ".data"
			out[name] = m.apply(append([]byte(nil), b...))
		}
	}
	return out
}

// TestMalformedCorpus: the committed corpus is what the malformations make,
// and the Reader turns each file down with an error or reads a bounded
// number of records from it.
func TestMalformedCorpus(t *testing.T) {
	corpus := malformedCorpus(t)
	if *update {
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
	files, _ := filepath.Glob(filepath.Join(malformedDir, "*.data"))
	if len(files) != len(corpus) {
		t.Fatalf("%d files in %s, the malformations make %d: run go test -run TestMalformedCorpus -update", len(files), malformedDir, len(corpus))
	}
	for name, want := range corpus {
		got, err := os.ReadFile(filepath.Join(malformedDir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: stale or missing (%v): run go test -run TestMalformedCorpus -update", name, err)
			continue
		}
		r, err := NewReader(bytes.NewReader(got), int64(len(got)))
		if err != nil {
			continue
		}
		if n := readEverything(r); n > len(got)/recordHeaderSize {
			t.Errorf("%s: %d records from %d bytes", name, n, len(got))
		}
	}
}
