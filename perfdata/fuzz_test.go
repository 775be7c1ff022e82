package perfdata

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readEverything drives every reading path over r: the records, and each
// feature through its decoder. It returns the number of records.
func readEverything(r *Reader) int {
	n := 0
	for r.Next() {
		n++
		if r.Record() == nil || len(r.Raw()) < recordHeaderSize {
			panic("Next returned true without a record")
		}
	}
	for _, f := range r.Features() {
		b, _ := r.Feature(f)
		switch f {
		case FeatHostname, FeatOSRelease, FeatVersion, FeatArch, FeatCPUDesc, FeatCPUID:
			DecodeString(b)
		case FeatCmdline:
			DecodeStrings(b)
		case FeatNRCPUs:
			DecodeNRCPUs(b)
		case FeatEventDesc:
			DecodeEventDesc(b)
		case FeatBuildID:
			DecodeBuildIDs(b)
		}
	}
	return n
}

// FuzzReader feeds arbitrary bytes to the Reader in file and pipe mode:
// it must return errors, never panic, loop or allocate beyond the input.
func FuzzReader(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.data"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds: %v", err)
	}
	broken, _ := filepath.Glob(filepath.Join(malformedDir, "*.data"))
	seeds = append(seeds, broken...)
	for _, path := range seeds {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte("PERFILE2\x10\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := NewReader(bytes.NewReader(data), int64(len(data))); err == nil {
			if n := readEverything(r); n > len(data)/recordHeaderSize {
				t.Fatalf("%d records from %d bytes", n, len(data))
			}
			if err := r.Err(); err != nil && !strings.HasPrefix(err.Error(), "perf.data: ") {
				t.Fatalf("error does not name the input: %v", err)
			}
		}
		if r, err := NewPipeReader(bytes.NewReader(data)); err == nil {
			readEverything(r)
		}
		// A record as a live reader gets it, against each kind of layout.
		if len(data) >= recordHeaderSize && len(data) <= 0xffff {
			rec := append([]byte(nil), data...)
			le.PutUint16(rec[6:], uint16(len(rec))) // the header's size is right, the rest is not
			var buf RecordBuffer
			for _, a := range []Attr{{}, {SampleType: ^SampleType(0), Flags: FlagSampleIDAll, SampleRegsUser: 0xff}} {
				want, werr := DecodeRecord(rec, &a)
				// Into a buffer that held another record: the same record.
				got, gerr := DecodeRecordInto(rec, &a, &buf)
				if (werr == nil) != (gerr == nil) || werr == nil && !sameRecord(got, want) {
					t.Fatalf("into a used buffer: %+v (%v), alone: %+v (%v)", got, gerr, want, werr)
				}
			}
		}
		DecodeEventDesc(data)
		DecodeBuildIDs(data)
		DecodeStrings(data)
	})
}

// TestMalformed checks that damaged files give errors naming the place.
func TestMalformed(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "writer.data"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(good), int64(len(good)))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r)
	h, err := parseFileHeader(good, int64(len(good)))
	if err != nil {
		t.Fatal(err)
	}
	dataOff := int(h.Data.Offset)
	patch := func(off int, b ...byte) []byte {
		c := append([]byte{}, good...)
		copy(c[off:], b)
		return c
	}
	for _, c := range []struct {
		name string
		data []byte
		want string // in the error of NewReader or of Next
	}{
		{"empty", nil, "not a perf.data file: 0 bytes, shorter than any perf.data header"},
		{"shorter than a header", good[:15], "not a perf.data file: 15 bytes, shorter than any perf.data header"},
		{"bad magic", patch(0, 'X'), "bad magic"},
		{"big-endian", patch(0, []byte("2ELIFREP")...), "big-endian"},
		{"header size", patch(8, 99), "header: size 99"},
		{"attr size 0", patch(16, 0), "attr_size 0"},
		{"attrs beyond the end", patch(32, 0xff, 0xff, 0xff), "attrs"},
		{"data beyond the end", patch(48, 0xff, 0xff, 0xff), "data"},
		{"truncated", good[:len(good)-10], "feature"},
		{"record size 0", patch(dataOff+6, 0, 0), fmt.Sprintf("offset %#x: COMM record: size 0", dataOff)},
		{"record past the data", patch(dataOff+6, 0xf8, 0xff), "runs past the end of the data"},
		{"comm too short for its trailer", patch(dataOff+6, 16, 0), "no room for its 24-byte sample_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(c.data), int64(len(c.data)))
			if err == nil {
				for r.Next() {
				}
				err = r.Err()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "perf.data: ") {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
