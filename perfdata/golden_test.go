package perfdata

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// goldenSynthetic is a small, fully deterministic file's content.
func goldenSynthetic(t *testing.T) synthetic {
	m := textMapping{mmap: Mmap2{Misc: MiscUser, Pid: testPid, Tid: testPid, Addr: 0x7f0000000000, Len: 0x10000,
		Maj: 8, Min: 1, Ino: 1234, Prot: 5, Flags: 2, Filename: "/usr/lib/libfake.so"},
		funcs: []textFunc{{ip: 0x7f0000001000}, {ip: 0x7f0000002000}, {ip: 0x7f0000003000}}}
	return makeSynthetic(t, m, 5)
}

// TestGoldenWriter pins the Writer's bytes to testdata/writer.data, which
// perf 6.1 opens (checked below when perf is here) and which seeds
// FuzzReader. Run with -update after an intended change.
func TestGoldenWriter(t *testing.T) {
	s := goldenSynthetic(t)
	path := filepath.Join(t.TempDir(), "writer.data")
	s.write(t, path)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "writer.data")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the Writer's output differs from %s (%d bytes, want %d); run go test -update if intended", golden, len(got), len(want))
	}
}

// TestSeedFiles reads every checked-in perf.data: ours from the Writer,
// and small ones perf record wrote on the reference machine (file mode
// with -g and with dwarf stacks, pipe mode). Each reads without error, and
// where perf is installed, with the record counts perf reports.
func TestSeedFiles(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.data"))
	if err != nil || len(paths) < 4 {
		t.Fatalf("seed files %v: %v", paths, err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			counts, samples := stockCounts(t, r)
			if len(samples) == 0 {
				t.Fatal("no samples")
			}
			for _, s := range samples {
				if s.Event != 0 {
					t.Errorf("sample of event %d", s.Event)
				}
			}
			// The counts were checked when the seed was recorded; perf, where
			// it is, checks them again (a subtest: it skips without perf).
			t.Run("perf-report", func(t *testing.T) {
				for name, n := range perfStats(t, path) {
					if name != "TOTAL" && name != "ATTR" && name != "FEATURE" && name != "EVENT_UPDATE" && counts[name] != n {
						t.Errorf("%s records: read %d, perf counts %d", name, counts[name], n)
					}
				}
			})
		})
	}
}
