package perfdata

import (
	"bytes"
	"reflect"
	"testing"
)

// fullAttr sets every field of Attr to a distinct value.
func fullAttr() Attr {
	return Attr{
		Type: 4, Size: attrSizeVer8, Config: 0x1111, SamplePeriodOrFreq: 0x2222,
		SampleType: SampleIP | SampleTID, ReadFormat: ReadID, Flags: FlagDisabled | FlagSigtrap,
		WakeupEventsOrWatermark: 0x33, BPType: 0x44, Config1: 0x5555, Config2: 0x6666,
		BranchSampleType: 0x7777, SampleRegsUser: 0x8888, SampleStackUser: 0x99, ClockID: -7,
		SampleRegsIntr: 0xaaaa, AuxWatermark: 0xbb, SampleMaxStack: 0xcc, AuxSampleSize: 0xdd,
		SigData: 0xeeee, Config3: 0xffff,
	}
}

// rawAttr encodes a in the uapi layout at size bytes (up to 136), by hand.
func rawAttr(a Attr, size int) []byte {
	b := make([]byte, 144)
	le.PutUint32(b[0:], a.Type)
	le.PutUint32(b[4:], uint32(size))
	le.PutUint64(b[8:], a.Config)
	le.PutUint64(b[16:], a.SamplePeriodOrFreq)
	le.PutUint64(b[24:], uint64(a.SampleType))
	le.PutUint64(b[32:], uint64(a.ReadFormat))
	le.PutUint64(b[40:], uint64(a.Flags))
	le.PutUint32(b[48:], a.WakeupEventsOrWatermark)
	le.PutUint32(b[52:], a.BPType)
	le.PutUint64(b[56:], a.Config1)
	le.PutUint64(b[64:], a.Config2)
	le.PutUint64(b[72:], a.BranchSampleType)
	le.PutUint64(b[80:], a.SampleRegsUser)
	le.PutUint32(b[88:], a.SampleStackUser)
	le.PutUint32(b[92:], uint32(a.ClockID))
	le.PutUint64(b[96:], a.SampleRegsIntr)
	le.PutUint32(b[104:], a.AuxWatermark)
	le.PutUint16(b[108:], a.SampleMaxStack)
	le.PutUint32(b[112:], a.AuxSampleSize)
	le.PutUint64(b[120:], a.SigData)
	le.PutUint64(b[128:], a.Config3)
	return b[:size]
}

// truncateAttr zeroes the fields a struct of size bytes lacks
// (PERF_ATTR_SIZE_VER0..VER8).
func truncateAttr(a Attr, size int) Attr {
	a.Size = uint32(size)
	for _, v := range []struct {
		size  int
		clear func()
	}{
		{72, func() { a.Config2 = 0 }},
		{80, func() { a.BranchSampleType = 0 }},
		{96, func() { a.SampleRegsUser, a.SampleStackUser, a.ClockID = 0, 0, 0 }},
		{104, func() { a.SampleRegsIntr = 0 }},
		{112, func() { a.AuxWatermark, a.SampleMaxStack = 0, 0 }},
		{120, func() { a.AuxSampleSize = 0 }},
		{128, func() { a.SigData = 0 }},
		{136, func() { a.Config3 = 0 }},
	} {
		if size < v.size {
			v.clear()
		}
	}
	return a
}

// fileWithAttr builds a file-mode perf.data around one attr of any size
// and some records, laid out by hand.
func fileWithAttr(attr []byte, ids []uint64, records ...[]byte) []byte {
	attrsOff := uint64(fileHeaderSize)
	idsOff := attrsOff + uint64(len(attr)) + 16
	dataOff := idsOff + 8*uint64(len(ids))
	var data []byte
	for _, r := range records {
		data = append(data, r...)
	}
	h := fileHeader{Magic: magic2, Size: fileHeaderSize, AttrSize: uint64(len(attr)) + 16,
		Attrs: section{attrsOff, uint64(len(attr)) + 16}, Data: section{dataOff, uint64(len(data))}}
	b := h.append(nil)
	b = append(b, attr...)
	b = le.AppendUint64(b, idsOff)
	b = le.AppendUint64(b, 8*uint64(len(ids)))
	for _, id := range ids {
		b = le.AppendUint64(b, id)
	}
	return append(b, data...)
}

// TestAttrSizes reads attrs of every published size, and a larger one
// from a future perf: fields past the size are zero, extra bytes skipped.
func TestAttrSizes(t *testing.T) {
	full := fullAttr()
	for _, size := range []int{64, 72, 80, 96, 104, 112, 120, 128, 136, 144} {
		raw := rawAttr(full, min(size, attrSizeVer8))
		raw = append(raw, make([]byte, size-len(raw))...)
		le.PutUint32(raw[4:], uint32(size))
		want := truncateAttr(full, size)
		data := fileWithAttr(raw, []uint64{5})
		r, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if got := r.Events(); len(got) != 1 || got[0].Attr != want || !reflect.DeepEqual(got[0].IDs, []uint64{5}) {
			t.Errorf("size %d: events %+v, want attr %+v", size, got, want)
		}
	}
	// What the Writer writes is the hand layout at 128 bytes.
	a := full
	a.Config3 = 0
	got, err := appendAttr(nil, &a)
	if err != nil {
		t.Fatal(err)
	}
	if want := rawAttr(a, AttrSize); !bytes.Equal(got, want) {
		t.Errorf("appendAttr:\n% x\nwant\n% x", got, want)
	}
}

func TestPreciseIP(t *testing.T) {
	f := FlagSampleIDAll.WithPreciseIP(3)
	if f.PreciseIP() != 3 || f&FlagSampleIDAll == 0 || uint64(f) != 1<<18|3<<15 {
		t.Errorf("%#x", uint64(f))
	}
	if f.WithPreciseIP(1).PreciseIP() != 1 {
		t.Error("WithPreciseIP(1)")
	}
}
