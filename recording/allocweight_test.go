package recording

import (
	"encoding/binary"
	"testing"

	"github.com/rubyperf/rubyperf/payload"
)

// allocRecord is a sample record of an allocation sample of process pid
// at time: objects of 40 bytes seen in window.
func allocRecord(pid uint32, time, objects uint64, window uint32) []byte {
	return sampleRecord(payload.Alloc, pid, time, objects, func(h []byte) {
		binary.LittleEndian.PutUint64(h[88:], objects*40) // alloc_bytes
		binary.LittleEndian.PutUint32(h[96:], window)     // alloc_window
	})
}

// TestAllocWindows: an allocation sample read before its window has
// ended is held, and written weighed by the window's weight when it ends;
// one read after is written weighed at once; one whose window never ends
// is written at the end with its process's latest weight, and counted.
// Real recordings run this path in cmd/rubyperf's TestRecordAlloc.
func TestAllocWindows(t *testing.T) {
	s, path := fileSession(t)
	sample := func(pid uint32, time, objects uint64, window uint32) {
		t.Helper()
		s.raw = allocRecord(pid, time, objects, window)
		if err := s.allocSample(&payload.Payload{PID: pid, Flags: payload.Alloc, Period: objects, AllocWindow: window}); err != nil {
			t.Fatal(err)
		}
	}
	sample(10, 1, 1000, 1)
	sample(10, 2, 500, 1)
	sample(11, 3, 800, 1) // another process's window 1
	if s.alloc.n != 3 {
		t.Fatalf("%d samples held, want 3", s.alloc.n)
	}
	if err := s.allocWeighed(10, 1, 4); err != nil {
		t.Fatal(err)
	}
	sample(10, 4, 100, 1) // late: its window's weight is known
	sample(10, 5, 300, 2) // its window never ends: 10's latest weight
	sample(12, 6, 700, 9) // never weighed, nor its process: as seen
	if err := s.allocWeighed(11, 1, 0.5); err != nil {
		t.Fatal(err)
	}
	if err := s.flushAlloc(); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]uint64{1: 4000, 2: 2000, 3: 400, 4: 400, 5: 1200, 6: 700}
	got := writtenSamples(t, s, path)
	if len(got) != len(want) {
		t.Errorf("%d samples written, want %d", len(got), len(want))
	}
	for _, p := range got {
		if p.Period != want[p.time] || p.AllocBytes != 40*want[p.time] {
			t.Errorf("sample at %d: %d objects, %d bytes; want %d, %d", p.time, p.Period, p.AllocBytes, want[p.time], 40*want[p.time])
		}
	}
	if s.sum.AllocUnweighed != 2 || s.alloc.n != 0 {
		t.Errorf("%d samples with an earlier window's weight (want 2), %d still held", s.sum.AllocUnweighed, s.alloc.n)
	}
}
