package recording

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/payload"
)

// allocSlotRecord is allocRecord's sample with its slot and number.
func allocSlotRecord(pid uint32, time, objects uint64, window, seq uint32, slot uint64) []byte {
	rec := allocRecord(pid, time, objects, window)
	// The payload's header starts 60 bytes into the record (sampleRecord).
	binary.LittleEndian.PutUint32(rec[60+100:], seq)
	binary.LittleEndian.PutUint64(rec[60+104:], slot)
	return rec
}

// TestAllocClasses: a weighed allocation sample is written with a class
// when what its slot held comes, before it or after, matched by process,
// thread, window, number and slot (a slot comes back within a window once
// swept: the number tells its samples apart); one whose report never comes
// is written without after allocClassWait, or at the end; one without a
// slot at once. Real recordings run this path in cmd/rubyperf's
// TestRecordAlloc, which checks the classes against Ruby's count.
func TestAllocClasses(t *testing.T) {
	s, path := fileSession(t)
	seen := func(pid, window, seq uint32, slot uint64) {
		t.Helper()
		if err := s.allocSeen(&payload.AllocSeen{Pid: pid, Tid: pid, Window: window, Seq: seq, Slot: slot, Flags: 5}); err != nil {
			t.Fatal(err)
		}
	}
	weighed := func(time uint64, window, seq uint32, slot uint64) {
		t.Helper()
		rec := allocSlotRecord(10, time, 100, window, seq, slot)
		s.weighAlloc(rec, 1)
		if err := s.classAlloc(rec); err != nil {
			t.Fatal(err)
		}
	}
	seen(10, 1, 1, 0x1000)   // before its sample
	weighed(1, 1, 1, 0x1000) // -> classed at once
	weighed(2, 1, 2, 0x2000) // waits
	weighed(3, 1, 3, 0x1000) // the same slot again, another number: waits
	seen(10, 1, 3, 0x1000)   // -> 3 classed
	seen(10, 1, 2, 0x2000)   // -> 2 classed
	seen(10, 2, 2, 0x2000)   // another window's: kept, matches nothing
	weighed(4, 1, 4, 0x3000) // its report never comes
	weighed(5, 1, 5, 0)      // no slot: at once, without
	s.allocClass.waiting[payload.AllocKey{PID: 10, TID: 10, Window: 1, Seq: 4, Slot: 0x3000}] = allocWaiting{
		rec: s.allocClass.waiting[payload.AllocKey{PID: 10, TID: 10, Window: 1, Seq: 4, Slot: 0x3000}].rec, since: time.Now().Add(-time.Second)}
	weighed(6, 1, 6, 0x4000) // waits until the end
	if err := s.flushAllocClasses(allocClassWait); err != nil {
		t.Fatal(err)
	}
	if len(s.allocClass.waiting) != 1 {
		t.Errorf("%d samples wait after the expiry, want 1", len(s.allocClass.waiting))
	}
	if err := s.flushAllocClasses(0); err != nil {
		t.Fatal(err)
	}
	classed := map[uint64]bool{1: true, 2: true, 3: true}
	got := writtenSamples(t, s, path)
	if len(got) != 6 {
		t.Errorf("%d samples written, want 6", len(got))
	}
	for _, w := range got {
		if c := w.Flags&payload.AllocClassed != 0; c != classed[w.time] || c && w.AllocClass == 0 {
			t.Errorf("sample at %d: classed %v (class id %d), want %v", w.time, c, w.AllocClass, classed[w.time])
		}
	}
	// No target to read classes from: the three matched read as unknown.
	if s.sum.AllocClassed != 0 || s.sum.AllocUnclassed != 6 {
		t.Errorf("%d classed, %d not; want 0, 6", s.sum.AllocClassed, s.sum.AllocUnclassed)
	}
}
