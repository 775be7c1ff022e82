package perfdata

import (
	"bytes"
	"path/filepath"
	"testing"
)

// rawRecords reads every record of path, each Raw copied, after setup.
func rawRecords(t *testing.T, path string, setup func(*Reader)) (types []RecordType, raws [][]byte) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	setup(r)
	for r.Next() {
		raw := r.Raw()
		types = append(types, RecordType(le.Uint32(raw)))
		raws = append(raws, bytes.Clone(raw))
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return types, raws
}

// TestOnlyAndReuseBuffer reads perf's own files (file and pipe mode) three
// ways: plainly, with Only, and with ReuseBuffer; the filtered reader must
// give exactly the plain reader's records of those types, and the reusing
// one exactly all of them.
func TestOnlyAndReuseBuffer(t *testing.T) {
	for _, name := range []string{"perf-dwarf.data", "perf-fp.data", "perf-pipe.data"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", name)
			types, raws := rawRecords(t, path, func(*Reader) {})
			samples := 0
			for _, typ := range types {
				if typ == RecordSample {
					samples++
				}
			}
			if samples == 0 {
				t.Fatalf("%s has no samples to pass over", name)
			}

			ftypes, fraws := rawRecords(t, path, func(r *Reader) { r.Only(RecordComm, RecordMmap2) })
			var want [][]byte
			for i, typ := range types {
				if typ == RecordComm || typ == RecordMmap2 || typ >= RecordUserTypeStart {
					want = append(want, raws[i])
				}
			}
			if len(fraws) != len(want) {
				t.Fatalf("Only: %d records, want %d", len(fraws), len(want))
			}
			for i := range want {
				if !bytes.Equal(fraws[i], want[i]) {
					t.Fatalf("Only: record %d (%v) differs", i, ftypes[i])
				}
			}

			_, rraws := rawRecords(t, path, func(r *Reader) { r.ReuseBuffer() })
			if len(rraws) != len(raws) {
				t.Fatalf("ReuseBuffer: %d records, want %d", len(rraws), len(raws))
			}
			for i := range raws {
				if !bytes.Equal(rraws[i], raws[i]) {
					t.Fatalf("ReuseBuffer: record %d (%v) differs", i, types[i])
				}
			}
		})
	}
}
