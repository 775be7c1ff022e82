package perfdata

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// writeUntilFull writes the COMM/MMAP2 prologue and then samples through
// w until a write fails (or max records), and returns what it offered.
func writeUntilFull(t *testing.T, w *Writer, max int) ([]Record, error) {
	t.Helper()
	s := goldenSynthetic(t)
	if err := w.AddEvent(s.attr, s.name, s.ids); err != nil {
		t.Fatal(err)
	}
	if err := w.SetFeature(FeatHostname, EncodeString("full")); err != nil {
		t.Fatal(err)
	}
	if err := w.SetFeature(privateBit, make([]byte, 3000)); err != nil {
		t.Fatal(err)
	}
	var offered []Record
	add := func(rec Record) error {
		offered = append(offered, rec)
		return w.Synthesize(0, rec)
	}
	for _, rec := range s.records[:4] { // COMM, FORK, COMM, MMAP2
		if err := add(rec); err != nil {
			return offered, err
		}
	}
	proto := *s.records[4].(*Sample)
	for i := 0; i < max; i++ {
		smp := proto
		smp.Time += uint64(i) * 1000
		smp.Raw = make([]byte, 4+8*(i%7)) // records of different sizes
		if err := add(&smp); err != nil {
			return offered, err
		}
	}
	// A feature known only at the end, written after the data.
	return offered, w.SetFeature(FeatBuildID, make([]byte, 2000))
}

// checkPrefix checks that the file at path holds whole records, the first
// ones offered, as many as the Writer says, and that perf opens it.
func checkPrefix(t *testing.T, path string, w *Writer, offered []Record) int {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAll(t, r)
	n, _ := w.Records()
	if len(got) != n {
		t.Errorf("file holds %d records, the Writer says %d", len(got), n)
	}
	if len(got) >= len(offered) {
		t.Fatalf("file holds %d records of %d offered: nothing was lost?", len(got), len(offered))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], offered[i]) {
			t.Fatalf("record %d: read %+v, offered %+v", i, got[i], offered[i])
		}
	}
	samples := 0
	for _, rec := range got {
		if _, ok := rec.(*Sample); ok {
			samples++
		}
	}
	// perf 6.1 refuses a file without records ("data size field is 0").
	// A subtest: it skips without perf.
	if len(got) > 0 {
		t.Run("perf-script", func(t *testing.T) {
			if n := perfScriptSamples(t, path); n != samples {
				t.Errorf("perf script prints %d samples, the file holds %d", n, samples)
			}
		})
	}
	return samples
}

// TestDiskFull fills a 64 KiB tmpfs: the Writer reports the failure, Close
// leaves a valid perf.data with every whole record, and perf reads it.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		testskip.Privileged(t, fmt.Errorf("mount a 64 KiB tmpfs: %w", err))
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	path := filepath.Join(dir, "full.data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	offered, werr := writeUntilFull(t, w, 100000)
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing to a full tmpfs: %v, want ENOSPC", werr)
	}
	if err := w.Synthesize(0, &FinishedRound{}); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write after the failure: %v, want the same error", err)
	}
	cerr := w.Close()
	if !errors.Is(cerr, syscall.ENOSPC) {
		t.Errorf("Close: %v, want it to report ENOSPC", cerr)
	}
	t.Logf("write: %v\nclose: %v", werr, cerr)
	samples := checkPrefix(t, path, w, offered)
	if samples < 100 {
		t.Errorf("only %d samples in 64 KiB", samples)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.Events()) != 1 || r.Events()[0].Name != testEvent {
		t.Errorf("events %+v: EVENT_DESC should fit when the rest does not", r.Events())
	}
}

// failingFile is a file whose writes fail with ENOSPC past limit bytes,
// writing what fits first, as a full disk does.
type failingFile struct {
	*os.File
	limit int64
}

func (f *failingFile) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) <= f.limit {
		return f.File.WriteAt(p, off)
	}
	n := 0
	if off < f.limit {
		var err error
		if n, err = f.File.WriteAt(p[:f.limit-off], off); err != nil {
			return n, err
		}
	}
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

// hugeBit is a feature TestWriteFailureAt keeps that never fits.
const hugeBit Feature = 250

// TestWriteFailureAt simulates a full disk at many file sizes: in the
// attrs, at and inside records, and in the feature sections.
func TestWriteFailureAt(t *testing.T) {
	const samples = 1200
	write := func(limit int64, keep ...Feature) (w *Writer, path string, offered []Record, werr, cerr error) {
		path = filepath.Join(t.TempDir(), "f.data")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if w, err = newWriter(&failingFile{File: f, limit: limit}); err != nil {
			t.Fatal(err)
		}
		for _, f := range keep {
			w.KeepFeature(f)
		}
		offered, werr = writeUntilFull(t, w, samples)
		if slices.Contains(keep, hugeBit) {
			// Kept, and larger than all the records: never room for it.
			w.SetFeature(hugeBit, make([]byte, 1<<20))
		}
		return w, path, offered, werr, w.Close()
	}
	// Where the data ends when everything fits.
	w, _, _, werr, cerr := write(1 << 40)
	if werr != nil || cerr != nil {
		t.Fatal(werr, cerr)
	}
	dataEnd := w.dataOff + w.dataSize
	limits := []int64{104, 200, 300, 3500, 4096, 4100, 65536 + 104, 70000, 120000, dataEnd - 1}
	for _, limit := range limits {
		w, path, offered, werr, cerr := write(limit)
		if !w.attrsOK {
			// The attrs do not fit: there can be no valid file.
			if werr == nil || cerr == nil {
				t.Errorf("limit %d: write %v, close %v; want errors", limit, werr, cerr)
			}
			continue
		}
		// Records are buffered, so the failure may surface only in Close.
		if werr != nil && !errors.Is(werr, syscall.ENOSPC) || !errors.Is(cerr, syscall.ENOSPC) {
			t.Errorf("limit %d: write %v, close %v; want ENOSPC", limit, werr, cerr)
		}
		checkPrefix(t, path, w, offered)
	}

	// The data fits; of the features, all, or those placed before the
	// data; where even their table does not fit, or a feature kept (here
	// BUILD_ID, 2000 bytes set after the data) does not, the latest
	// records, as few as make room for it.
	all := []Feature{FeatBuildID, FeatHostname, FeatEventDesc, privateBit}
	placed := []Feature{FeatHostname, FeatEventDesc, privateBit}
	for _, c := range []struct {
		room     int64
		keep     []Feature
		feats    []Feature
		giveBack bool
	}{
		{5000, nil, all, false},
		{100, nil, placed, false},
		{10, nil, placed, true},
		{5000, []Feature{FeatBuildID}, all, false},
		{100, []Feature{FeatBuildID}, all, true},
		{100, []Feature{FeatBuildID, hugeBit}, all, true},
	} {
		name := fmt.Sprintf("room %d for features, keeping %v", c.room, c.keep)
		w, path, offered, werr, cerr := write(dataEnd+c.room, c.keep...)
		if werr != nil || (cerr == nil) != (len(c.feats) == 4 && !c.giveBack) {
			t.Errorf("%s: write %v, close %v", name, werr, cerr)
		}
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, r)
		n, _ := w.Records()
		if len(got) != n {
			t.Errorf("%s: the file holds %d records, the Writer says %d", name, len(got), n)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], offered[i]) {
				t.Fatalf("%s: record %d: read %+v, offered %+v", name, i, got[i], offered[i])
			}
		}
		// As few given back as make room: a record here is 80-128 bytes.
		want := len(offered)
		if c.giveBack {
			need := int(16*len(c.feats)) - int(c.room)
			if slices.Contains(c.keep, FeatBuildID) {
				need += 2000
			}
			want -= need/80 + 1
		}
		if len(got) > len(offered) || len(got) < want || c.giveBack == (len(got) == len(offered)) {
			t.Errorf("%s: %d records of %d (want at least %d; gave back: %v)", name, len(got), len(offered), want, cerr)
		}
		if got := r.Features(); !reflect.DeepEqual(got, c.feats) {
			t.Errorf("%s: features %v, want %v (close: %v)", name, got, c.feats, cerr)
		}
		r.Close()
		if _, err := exec.LookPath("perf"); err == nil {
			samples := 0
			for _, rec := range got {
				if _, ok := rec.(*Sample); ok {
					samples++
				}
			}
			if n := perfScriptSamples(t, path); n != samples {
				t.Errorf("%s: perf script prints %d samples, want %d", name, n, samples)
			}
		}
	}
}
