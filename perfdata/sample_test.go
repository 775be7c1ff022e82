package perfdata

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
)

// TestSampleLayout decodes a SAMPLE with every field, assembled by hand in
// the order of the kernel's perf_output_sample, and encodes it back.
func TestSampleLayout(t *testing.T) {
	a := &Attr{
		SampleType:       sampleKnown &^ SampleWeight, // WEIGHT and WEIGHT_STRUCT exclude each other
		ReadFormat:       ReadTotalTimeEnabled | ReadTotalTimeRunning | ReadID | ReadLost | ReadGroup,
		BranchSampleType: BranchHWIndex,
		SampleRegsUser:   0b1011, // 3 registers
		SampleRegsIntr:   0b1,    // 1 register
	}
	var b []byte
	u64 := func(v ...uint64) {
		for _, x := range v {
			b = le.AppendUint64(b, x)
		}
	}
	u32 := func(v ...uint32) {
		for _, x := range v {
			b = le.AppendUint32(b, x)
		}
	}
	u64(0x11)       // IDENTIFIER id
	u64(0x400000)   // IP ip
	u32(100, 101)   // TID pid, tid
	u64(5_000_000)  // TIME time
	u64(0xadd)      // ADDR addr
	u64(0x11)       // ID id
	u64(0x22)       // STREAM_ID stream_id
	u32(3, 0)       // CPU cpu, res
	u64(1000)       // PERIOD period
	u64(2, 70, 60)  // READ nr, time_enabled, time_running
	u64(7, 0x11, 0) // value, id, lost
	u64(8, 0x12, 1) //
	u64(3)          // CALLCHAIN nr
	u64(ContextUser, 0x400000, 0x400100)
	u32(12) // RAW size
	b = append(b, "raw-payload!"...)
	u64(1, 9)          // BRANCH_STACK nr, hw_idx
	u64(0x1, 0x2, 0x3) // from, to, flags
	u64(RegsABI64)     // REGS_USER abi
	u64(10, 11, 12)    // regs
	u64(16)            // STACK_USER size
	b = append(b, "stack-bytes\x00\x00\x00\x00\x00"...)
	u64(11)            // dyn_size
	u64(0x77)          // WEIGHT_STRUCT
	u64(0x88)          // DATA_SRC
	u64(0x99)          // TRANSACTION
	u64(RegsABI64, 13) // REGS_INTR abi, regs
	u64(0xaaaa)        // PHYS_ADDR
	u64(0xcc)          // CGROUP
	u64(4096, 2<<20)   // DATA_PAGE_SIZE, CODE_PAGE_SIZE
	u64(8)             // AUX size
	b = append(b, "aux-data"...)

	want := &Sample{
		Event: 2, Misc: MiscUser | MiscExactIP, ID: 0x11, IP: 0x400000, Pid: 100, Tid: 101, Time: 5_000_000,
		Addr: 0xadd, StreamID: 0x22, CPU: 3, Period: 1000,
		Read:      ReadValues{TimeEnabled: 70, TimeRunning: 60, Counters: []Counter{{7, 0x11, 0}, {8, 0x12, 1}}},
		Callchain: []uint64{ContextUser, 0x400000, 0x400100}, Raw: []byte("raw-payload!"),
		BranchHWIndex: 9, Branches: []BranchEntry{{1, 2, 3}},
		RegsUserABI: RegsABI64, RegsUser: []uint64{10, 11, 12},
		StackUser: []byte("stack-bytes"), StackUserSize: 16,
		Weight: 0x77, DataSrc: 0x88, Transaction: 0x99, RegsIntrABI: RegsABI64, RegsIntr: []uint64{13},
		PhysAddr: 0xaaaa, Cgroup: 0xcc, DataPageSize: 4096, CodePageSize: 2 << 20, Aux: []byte("aux-data"),
	}
	got, err := decodeNewSample(b, MiscUser|MiscExactIP, a, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, want)
	}
	if enc, err := appendSample(nil, a, want); err != nil || !bytes.Equal(enc, b) {
		t.Errorf("encoded\n% x (%v)\nwant\n% x", enc, err, b)
	}

	// Every truncation of the body is an error, never a panic.
	for n := 0; n < len(b); n++ {
		if _, err := decodeNewSample(b[:n], 0, a, 0); err == nil {
			t.Fatalf("a body cut at %d of %d bytes decoded", n, len(b))
		}
	}
}

// TestSampleNoRegs: REGS_USER with ABI none carries no registers, and an
// empty STACK_USER no data and no dyn_size (a kernel thread's sample).
func TestSampleNoRegs(t *testing.T) {
	a := &Attr{SampleType: SampleRegsUser | SampleStackUser | SamplePhysAddr, SampleRegsUser: 0xff}
	b := le.AppendUint64(nil, RegsABINone) // abi
	b = le.AppendUint64(b, 0)              // stack size
	b = le.AppendUint64(b, 42)             // phys_addr
	s, err := decodeNewSample(b, 0, a, 0)
	if err != nil || s.RegsUser != nil || s.StackUser != nil || s.StackUserSize != 0 || s.PhysAddr != 42 {
		t.Errorf("%+v %v", s, err)
	}
	enc, err := appendSample(nil, a, s)
	if err != nil || !bytes.Equal(enc, b) {
		t.Errorf("encoded % x, %v; want % x", enc, err, b)
	}
}

// TestRawPadding: the Writer pads RAW as the kernel does, so that the u32
// size plus the data is a multiple of 8 bytes.
func TestRawPadding(t *testing.T) {
	a := &Attr{SampleType: SampleRaw | SamplePeriod}
	for n := 0; n < 20; n++ {
		b, err := appendSample(nil, a, &Sample{Period: 1, Raw: bytes.Repeat([]byte{'x'}, n)})
		if err != nil {
			t.Fatal(err)
		}
		size := int(le.Uint32(b[8:]))
		if (4+size)%8 != 0 || size < n || size >= n+8 || len(b) != 8+4+size {
			t.Errorf("raw of %d bytes: size %d, record body %d bytes", n, size, len(b))
		}
	}
}

// decodeNewSample is decodeSample into a new Sample.
func decodeNewSample(body []byte, misc Misc, a *Attr, ev int) (*Sample, error) {
	s := new(Sample)
	if err := decodeSample(s, body, misc, a, ev); err != nil {
		return nil, err
	}
	return s, nil
}

// TestDecodeRecordInto: records decoded into one RecordBuffer, one after
// another, are what DecodeRecord makes of each alone, whatever the buffer
// held before; and a stream of samples decoded into it allocates nothing.
func TestDecodeRecordInto(t *testing.T) {
	a := &Attr{SampleType: SampleIP | SampleTID | SampleTime | SampleCPU | SamplePeriod | SampleCallchain | SampleRaw |
		SampleRegsUser | SampleStackUser, SampleRegsUser: 0x7, Flags: FlagSampleIDAll}
	sample := func(chain int) []byte {
		s := &Sample{IP: 1, Pid: 2, Tid: 3, Time: 4, CPU: 1, Period: 5, Raw: []byte("raw\x00"), RegsUserABI: RegsABI64,
			RegsUser: []uint64{7, 8, 9}, StackUser: []byte("stack!!!"), StackUserSize: 8}
		for i := range chain {
			s.Callchain = append(s.Callchain, uint64(0x1000+i))
		}
		b, err := appendRecord(nil, a, s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	side := func(rec Record) []byte {
		b, err := appendRecord(nil, a, rec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	stream := [][]byte{
		sample(40), sample(3),
		side(&Comm{Pid: 2, Tid: 3, Comm: "ruby", Trailer: Trailer{Pid: 2, Tid: 3, Time: 9}}),
		sample(0),
		side(&Mmap2{Pid: 2, Tid: 2, Addr: 0x1000, Len: 0x2000, Prot: 5, Filename: "/lib/libruby.so"}),
		side(&Fork{Pid: 4, PPid: 2, Tid: 4, PTid: 2, Time: 10}), side(&Exit{Pid: 4, PPid: 2, Tid: 4, PTid: 2, Time: 11}),
		side(&Lost{ID: 1, Lost: 7}), sample(100),
	}
	var buf RecordBuffer
	for i, raw := range stream {
		want, err := DecodeRecord(raw, a)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got, err := DecodeRecordInto(raw, a, &buf)
		if err != nil || !sameRecord(got, want) {
			t.Errorf("record %d into the buffer: %+v (%v); alone: %+v", i, got, err, want)
		}
	}
	small, large := sample(3), sample(100)
	allocs := testing.AllocsPerRun(100, func() {
		DecodeRecordInto(large, a, &buf)
		DecodeRecordInto(small, a, &buf)
	})
	if allocs != 0 {
		t.Errorf("decoding samples into a buffer allocates %.1f times a pair", allocs)
	}
}

// sameRecord: a and b hold the same values, an empty list and none alike.
func sameRecord(a, b Record) bool {
	norm := func(r Record) Record {
		s, ok := r.(*Sample)
		if !ok {
			return r
		}
		c := *s
		for _, l := range []*[]uint64{&c.Callchain, &c.RegsUser, &c.RegsIntr} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if len(c.Branches) == 0 {
			c.Branches = nil
		}
		if len(c.Read.Counters) == 0 {
			c.Read.Counters = nil
		}
		return &c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestSetSamplePeriod: the period written in place is the one decoded, for
// layouts with and without the fields before it.
func TestSetSamplePeriod(t *testing.T) {
	for _, st := range []SampleType{SamplePeriod, SampleIP | SampleTID | SampleTime | SampleCPU | SamplePeriod | SampleRaw,
		SampleIdentifier | SampleIP | SampleTID | SampleTime | SampleAddr | SampleID | SampleStreamID | SampleCPU | SamplePeriod | SampleCallchain} {
		a := &Attr{SampleType: st}
		raw, err := appendRecord(nil, a, &Sample{IP: 1, Pid: 2, Tid: 3, Time: 4, Addr: 5, ID: 6, StreamID: 7, CPU: 1, Period: 1,
			Callchain: []uint64{9}, Raw: []byte("raw\x00")})
		if err != nil {
			t.Fatal(err)
		}
		if err := SetSamplePeriod(raw, a, 12345); err != nil {
			t.Fatal(err)
		}
		rec, err := DecodeRecord(raw, a)
		if s, ok := rec.(*Sample); err != nil || !ok || s.Period != 12345 || s.IP != 1 && st&SampleIP != 0 {
			t.Errorf("sample_type %#x: %+v %v", uint64(st), rec, err)
		}
		if err := SetSamplePeriod(raw[:8], a, 1); err == nil {
			t.Errorf("sample_type %#x: a header alone took a period", uint64(st))
		}
	}
	if err := SetSamplePeriod(make([]byte, 64), &Attr{SampleType: SampleIP}, 1); err == nil {
		t.Error("a period set where the event records none")
	}
}

// TestCallchainIn: a context's addresses are those after its markers.
func TestCallchainIn(t *testing.T) {
	chain := []uint64{ContextKernel, 1, 2, ContextUser, 3, 4, ContextGuest, 5, ContextUser, 6}
	for _, c := range []struct {
		ctx  uint64
		want []uint64
	}{
		{ContextKernel, []uint64{1, 2}},
		{ContextUser, []uint64{3, 4, 6}},
		{ContextHV, nil},
	} {
		if got := slices.Collect(CallchainIn(chain, c.ctx)); !slices.Equal(got, c.want) {
			t.Errorf("context %#x: %v, want %v", c.ctx, got, c.want)
		}
	}
}
