package perfdata

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCopyStockRecords copies every record of a perf record file verbatim
// through WriteRecord, as the profiler copies records from kernel rings:
// perf script prints the copy exactly as the original.
func TestCopyStockRecords(t *testing.T) {
	for _, seed := range []string{"perf-fp.data", "perf-dwarf.data", "perf-pipe.data"} {
		t.Run(seed, func(t *testing.T) {
			orig := filepath.Join("testdata", seed)
			r, err := Open(orig)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			path := filepath.Join(t.TempDir(), "copy.data")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w, err := NewWriter(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.Events() {
				if err := w.AddEvent(e.Attr, e.Name, e.IDs); err != nil {
					t.Fatal(err)
				}
			}
			var want []Record
			for r.Next() {
				want = append(want, r.Record())
				if err := w.WriteRecord(r.Raw()); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			for _, feat := range r.Features() {
				if b, _ := r.Feature(feat); feat != FeatEventDesc {
					if err := w.SetFeature(feat, b); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			c, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := readAll(t, c); !reflect.DeepEqual(got, want) {
				t.Errorf("the copy reads back differently (%d records, want %d)", len(got), len(want))
			}
			perfBinary(t)
			a := runPerf(t, "script", "-i", orig, "-F", "comm,tid,time,event,ip,sym,dso,period")
			b := runPerf(t, "script", "-i", path, "-F", "comm,tid,time,event,ip,sym,dso,period")
			if a != b || len(a) == 0 {
				t.Errorf("perf script differs on the copy:\n%s\nwant:\n%s", firstLines(b, 10), firstLines(a, 10))
			}
		})
	}
}

// TestTwoEvents writes two events told apart by PERF_SAMPLE_IDENTIFIER:
// the Reader and perf both attribute each sample to its event.
func TestTwoEvents(t *testing.T) {
	attr := testAttr()
	attr.SampleType |= SampleIdentifier
	cpu := attr
	cpu.Config = CountSWCPUClock
	path := filepath.Join(t.TempDir(), "two.data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddEvent(attr, "ruby-stack", []uint64{10, 11}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddEvent(cpu, "native-cpu", []uint64{20, 21}); err != nil {
		t.Fatal(err)
	}
	tr := Trailer{Pid: testPid, Tid: testPid, Time: 1, ID: 10}
	if err := w.Synthesize(0, &Comm{Pid: testPid, Tid: testPid, Comm: testComm, Trailer: tr}); err != nil {
		t.Fatal(err)
	}
	ids := []uint64{10, 20, 21, 11, 20}
	for i, id := range ids {
		ev := 0
		if id >= 20 {
			ev = 1
		}
		s := &Sample{ID: id, IP: 0x1000, Pid: testPid, Tid: testPid, Time: uint64(100 + i), Period: 1, Callchain: []uint64{0x1000}, Raw: []byte("abcd")}
		if err := w.Synthesize(ev, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for _, rec := range readAll(t, r) {
		if s, ok := rec.(*Sample); ok {
			got = append(got, r.Events()[s.Event].Name)
		}
	}
	want := []string{"ruby-stack", "native-cpu", "native-cpu", "ruby-stack", "native-cpu"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("samples of %v, want %v", got, want)
	}
	perfBinary(t)
	if out := strings.Fields(runPerf(t, "script", "-i", path, "-F", "event", "-G")); !reflect.DeepEqual(out, suffixAll(want, ":")) {
		t.Errorf("perf script events %q, want %q", out, want)
	}
}

func suffixAll(list []string, s string) []string {
	out := make([]string, len(list))
	for i, x := range list {
		out[i] = x + s
	}
	return out
}

// TestWriterRefuses checks the Writer's refusals.
func TestWriterRefuses(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "x.data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	noID := testAttr()
	withID := noID
	withID.SampleType |= SampleIdentifier
	big := withID
	big.Config3 = 1
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"record before events", w.WriteRecord(make([]byte, 8)), "no events"},
		{"config3", w.AddEvent(big, "x", nil), "config3"},
		{"nul in name", w.AddEvent(withID, "a\x00b", nil), "NUL"},
		{"first", w.AddEvent(withID, "a", []uint64{1}), ""},
		{"same id", w.AddEvent(withID, "b", []uint64{1}), "id 1 is used twice"},
		{"no id", w.AddEvent(noID, "b", []uint64{2}), "PERF_SAMPLE_IDENTIFIER"},
		{"bad feature", w.SetFeature(0, []byte{1}), "out of range"},
		{"bad feature 256", w.SetFeature(256, []byte{1}), "out of range"},
		{"short record", w.WriteRecord(make([]byte, 4)), "shorter than its header"},
		{"size mismatch", w.WriteRecord([]byte{9, 0, 0, 0, 0, 0, 16, 0}), "header size 16, but 8 bytes"},
		{"no such event", w.Synthesize(3, &FinishedRound{}), "no event 3"},
		{"comm with NUL", w.Synthesize(0, &Comm{Comm: "a\x00"}), "NUL"},
		{"raw too big", w.Synthesize(0, &Sample{Raw: make([]byte, 70000)}), "exceeds"},
		{"late event", w.AddEvent(withID, "c", []uint64{3}), "records already written"},
	} {
		if c.want == "" && c.err != nil || c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want)) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Error("second Close: no error")
	}
}
