package recording

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/symtab"
)

// offCPURecord is a sample record (header and data) as the bpf-output event
// writes it without a stack copy, whose payload was taken as thread tid
// left a CPU at left (ns).
func offCPURecord(tid uint32, left uint64) []byte {
	return sampleRecord(payload.OffCPU, tid, left, left, nil)
}

// sampleRecord is a sample record (header and data) as the bpf-output
// event writes it without a stack copy, of thread tid at time, whose
// payload has flags and period, and what set does to its header.
func sampleRecord(flags, tid uint32, time, period uint64, set func(header []byte)) []byte {
	// The header of version 14 (120 bytes), and the kernel's padding to
	// make the raw data with its size a multiple of 8.
	const header = 120
	raw := make([]byte, header+4)
	binary.LittleEndian.PutUint32(raw[0:], payload.Magic)
	binary.LittleEndian.PutUint16(raw[4:], payload.Version)
	binary.LittleEndian.PutUint16(raw[6:], header)
	binary.LittleEndian.PutUint32(raw[8:], header)
	binary.LittleEndian.PutUint32(raw[16:], flags)
	binary.LittleEndian.PutUint32(raw[20:], tid) // pid
	binary.LittleEndian.PutUint32(raw[24:], tid)
	binary.LittleEndian.PutUint64(raw[48:], period)
	if set != nil {
		set(raw[:header])
	}
	d := make([]byte, 0, 160)
	d = binary.LittleEndian.AppendUint64(d, 0x401000)                    // ip
	d = binary.LittleEndian.AppendUint64(d, uint64(tid)|uint64(tid)<<32) // pid, tid
	d = binary.LittleEndian.AppendUint64(d, time)                        // time
	d = binary.LittleEndian.AppendUint64(d, 0)                           // cpu, res
	d = binary.LittleEndian.AppendUint64(d, 1)                           // period
	d = binary.LittleEndian.AppendUint64(d, 0)                           // callchain: none
	d = binary.LittleEndian.AppendUint32(d, uint32(len(raw)))            // raw
	d = append(d, raw...)
	rec := binary.LittleEndian.AppendUint32(nil, 9) // PERF_RECORD_SAMPLE
	rec = binary.LittleEndian.AppendUint16(rec, 0)
	rec = binary.LittleEndian.AppendUint16(rec, uint16(8+len(d)))
	return append(rec, d...)
}

// TestOffCPUPairing: an off-CPU sample gets the time to its end whichever
// comes first; one still held at the end weighs the time to then, unless
// its thread left a CPU again later (its end was lost: it weighs nothing).
// Real recordings run this path in cmd/rubyperf's TestState* tests.
func TestOffCPUPairing(t *testing.T) {
	s, path := fileSession(t)
	sample := func(tid uint32, left uint64) {
		t.Helper()
		s.raw = offCPURecord(tid, left)
		if err := s.offCPUSample(&payload.Payload{TID: tid, Period: left}); err != nil {
			t.Fatal(err)
		}
	}
	end := func(tid uint32, left, at uint64) {
		t.Helper()
		if err := s.offCPUEnd(&payload.OffCPUEnd{Tid: tid, Left: left, End: at}); err != nil {
			t.Fatal(err)
		}
	}
	now := monotonicNow()
	sample(1, now-5e9)
	end(1, now-5e9, now-4e9) // after its sample: 1 s
	end(2, now-3e9, now-1e9) // before its sample: 2 s
	sample(2, now-3e9)
	sample(3, now-2e9) // its end never comes, and it leaves again: 0
	sample(3, now-1e9) // still off at the end: about 1 s
	if len(s.off.held) != 2 {
		t.Fatalf("%d samples held, want 2", len(s.off.held))
	}
	if err := s.flushOffCPU(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]uint64{} // left -> weight
	for _, p := range writtenSamples(t, s, path) {
		got[p.time] = p.Period
	}
	for left, want := range map[uint64]uint64{now - 5e9: 1e9, now - 3e9: 2e9, now - 2e9: 0} {
		if got[left] != want {
			t.Errorf("interval left at -%d s: weighs %d ns, want %d", (now-left)/1e9, got[left], want)
		}
	}
	if w := got[now-1e9]; w < 1e9 || w > 2e9 {
		t.Errorf("interval still open at the end: weighs %d ns, want about 1 s", w)
	}
	if s.sum.OffCPUUnknown != 1 {
		t.Errorf("%d samples whose end never came, want 1", s.sum.OffCPUUnknown)
	}
}

// fileSession is a session that writes to a file, and the file's path.
func fileSession(t *testing.T) (*session, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rubyperf.data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{symtab: symtab.New(), checkpointed: time.Now().Add(time.Hour)}
	s.opts.Output = path
	w, err := perfdata.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	s.w, s.attr = &fileOutput{Writer: w}, outputAttr(bpf.Options{})
	if err := s.w.AddEvent(s.attr, "ruby-cpu", nil); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// writtenSample is a sample's payload as a file has it, and its time.
type writtenSample struct {
	*payload.Payload
	time uint64
}

// writtenSamples closes s's file and returns its samples, in order,
// checking that each record's period is its payload's.
func writtenSamples(t *testing.T, s *session, path string) []writtenSample {
	t.Helper()
	if err := s.w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := perfdata.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []writtenSample
	var tree payload.TreeDecoder // the file's samples are compact
	for r.Next() {
		smp, ok := r.Record().(*perfdata.Sample)
		if !ok {
			continue
		}
		raw, err := tree.Expand(smp.Raw)
		if err != nil {
			t.Fatalf("sample %+v: %v", smp, err)
		}
		p, err := payload.Decode(raw)
		if err != nil || smp.Period != p.Period {
			t.Fatalf("sample %+v: payload %+v, %v", smp, p, err)
		}
		out = append(out, writtenSample{p, smp.Time})
	}
	return out
}
