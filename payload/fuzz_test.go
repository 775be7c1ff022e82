package payload

import (
	"encoding/binary"
	"slices"
	"testing"
	"unsafe"
)

// payloadSeed builds a well-formed payload with n frames.
func payloadSeed(n int) []byte {
	b := make([]byte, headerSize+n*frameSize)
	binary.LittleEndian.PutUint32(b[0:], Magic)
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], uint16(headerSize))
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
	for i := 0; i < n; i++ {
		f := b[headerSize+i*frameSize:]
		binary.LittleEndian.PutUint64(f[0:], 0x7f0000001000+uint64(i)*64)
		binary.LittleEndian.PutUint64(f[8:], 0x7f0000100000+uint64(i)*8)
		binary.LittleEndian.PutUint64(f[16:], 0x7f0000200000|frameFinish)
	}
	return b
}

// labelledSeed is payloadSeed(n) with labels after its frames: a String
// label's copy and an immediate's.
func labelledSeed(n, labels int) []byte {
	b := payloadSeed(n)
	binary.LittleEndian.PutUint32(b[labelsAt():], uint32(labels))
	binary.LittleEndian.PutUint32(b[labelsAt()+4:], uint32(labelSize))
	for i := 0; i < labels; i++ {
		l := make([]byte, labelSize)
		binary.LittleEndian.PutUint64(l[0:], uint64(0x3f01+i*16)) // key (an ID)
		binary.LittleEndian.PutUint64(l[8:], uint64(2*i+1))       // value (a Fixnum)
		b = append(b, l...)
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)))
	return b
}

// labelsAt is the offset of nlabels in the header.
func labelsAt() int { return headerSizeV5 }

// TestDecodePayloadVersions: a version 5 payload (a header without nlabels)
// and a version 6 one with labels decode; labels past the payload do not.
func TestDecodePayloadVersions(t *testing.T) {
	v5 := payloadSeed(2)[:headerSizeV5]
	v5 = append(v5, payloadSeed(2)[headerSize:]...)
	binary.LittleEndian.PutUint16(v5[4:], 5)
	binary.LittleEndian.PutUint16(v5[6:], uint16(headerSizeV5))
	binary.LittleEndian.PutUint32(v5[8:], uint32(len(v5)))
	p, err := Decode(v5)
	if err != nil || len(p.Frames) != 2 || p.Frames[1].PC != 0x7f0000100008 || len(p.Labels) != 0 {
		t.Fatalf("version 5: %+v, %v", p, err)
	}
	p, err = Decode(labelledSeed(2, 3))
	if err != nil || len(p.Labels) != 3 || p.Labels[2].Key != 0x3f21 || p.Labels[2].Value != 5 || len(p.Frames) != 2 {
		t.Fatalf("labels: %+v, %v", p, err)
	}
	short := labelledSeed(2, 3)
	binary.LittleEndian.PutUint32(short[labelsAt():], 4)
	if _, err := Decode(short); err == nil {
		t.Error("4 labels in the room of 3: no error")
	}
	named := labelledSeed(1, 2)
	if err := NameLabels(named, nil, [][2]uint64{{2, 3}, {4, 5}}); err != nil {
		t.Fatal(err)
	}
	if p, err := Decode(named); err != nil || p.Flags&LabelsNamed == 0 || p.Labels[1].Key != 4 || p.Labels[1].Value != 5 {
		t.Fatalf("named labels: %+v, %v", p, err)
	}
}

func TestDecodePayload(t *testing.T) {
	p, err := Decode(append(payloadSeed(3), 0, 0, 0, 0)) // RAW padding
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Frames) != 3 || !p.Frames[2].Finish || p.Frames[2].CME != 0x7f0000200000 || p.Frames[1].PC != 0x7f0000100008 {
		t.Fatalf("payload %+v", p)
	}
	for _, bad := range [][]byte{nil, payloadSeed(2)[:headerSize+10], append([]byte{1}, payloadSeed(1)[1:]...)} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("no error for % x", bad[:min(len(bad), 16)])
		}
	}
}

func FuzzDecodePayload(f *testing.F) {
	f.Add(payloadSeed(0))
	f.Add(payloadSeed(5))
	f.Add(labelledSeed(3, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err == nil && (len(p.Frames) > MaxFrames || len(p.Labels) > MaxLabels) {
			t.Fatalf("%d frames, %d labels", len(p.Frames), len(p.Labels))
		}
		if err != nil {
			return
		}
		// Decoded again over its own decoding, half taken as it was: the
		// same frames.
		var q Payload
		d, err := DecodeHeader(&q, b)
		if err != nil {
			t.Fatalf("decodes whole, not its header: %v", err)
		}
		buf := DecodeFrames(&q, d, nil, 0)
		DecodeFrames(&q, d, buf, len(p.Frames)/2)
		if !slices.Equal(q.Frames, p.Frames) {
			t.Fatalf("decoded over itself: %+v, want %+v", q.Frames, p.Frames)
		}
	})
}

// FuzzNameLabels: the recorder's rewrite of a payload's labels into name
// ids never writes outside the payload, and what it accepts decodes with
// those ids, the frames as they were.
func FuzzNameLabels(f *testing.F) {
	f.Add(labelledSeed(2, 3), uint8(3))
	f.Add(labelledSeed(0, 1), uint8(2))
	f.Add(payloadSeed(1), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		names := make([][2]uint64, n)
		for i := range names {
			names[i] = [2]uint64{uint64(2 * i), uint64(2*i + 1)}
		}
		before, errBefore := Decode(b)
		raw := append([]byte(nil), b...)
		if err := NameLabels(raw, nil, names); err != nil {
			return
		}
		if errBefore != nil {
			t.Fatalf("named a payload that does not decode: %v", errBefore)
		}
		after, err := Decode(raw)
		if err != nil || after.Flags&LabelsNamed == 0 || len(after.Labels) != len(names) || len(after.Frames) != len(before.Frames) {
			t.Fatalf("after naming: %+v, %v", after, err)
		}
		for i, n := range names {
			if after.Labels[i].Key != n[0] || after.Labels[i].Value != n[1] || after.Labels[i].Obj != before.Labels[i].Obj {
				t.Fatalf("label %d: %+v, was %+v", i, after.Labels[i], before.Labels[i])
			}
		}
		for i := range after.Frames {
			if after.Frames[i] != before.Frames[i] {
				t.Fatalf("frame %d changed: %+v, was %+v", i, after.Frames[i], before.Frames[i])
			}
		}
	})
}

// FuzzNameFrames: the recorder's rewrite of a payload's frames into name
// ids never writes outside the payload, and what it accepts decodes with
// those ids and Named, everything else as it was.
func FuzzNameFrames(f *testing.F) {
	f.Add(payloadSeed(0), uint8(0))
	f.Add(payloadSeed(5), uint8(5))
	f.Add(payloadSeed(5), uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(i) + 2
		}
		before, errBefore := Decode(b)
		raw := append([]byte(nil), b...)
		if err := NameFrames(raw, nil, ids); err != nil {
			return
		}
		if errBefore != nil {
			t.Fatalf("named a payload that does not decode: %v", errBefore)
		}
		after, err := Decode(raw)
		if err != nil || after.Flags&Named == 0 || len(after.Frames) != len(ids) {
			t.Fatalf("after naming: %+v, %v", after, err)
		}
		for i := range ids {
			if after.Frames[i].Iseq != ids[i] || after.Frames[i].PC != before.Frames[i].PC || after.Frames[i].CME != before.Frames[i].CME {
				t.Fatalf("frame %d: %+v, was %+v", i, after.Frames[i], before.Frames[i])
			}
		}
	})
}

// allocSeed is payloadSeed(n) as an allocation sample of objects and
// bytes, taken in window.
func allocSeed(n int, objects, bytes uint64, window uint32) []byte {
	b := payloadSeed(n)
	le := binary.LittleEndian
	le.PutUint32(b[offFlags:], Alloc)
	le.PutUint64(b[unsafe.Offsetof(cPayloadHeader{}.Period):], objects)
	le.PutUint64(b[unsafe.Offsetof(cPayloadHeader{}.AllocBytes):], bytes)
	le.PutUint32(b[unsafe.Offsetof(cPayloadHeader{}.AllocWindow):], window)
	le.PutUint32(b[unsafe.Offsetof(cPayloadHeader{}.AllocSeq):], 5)
	le.PutUint64(b[unsafe.Offsetof(cPayloadHeader{}.AllocSlot):], 0x7f0000200028)
	return b
}

// asVersion is payload b (of Version, without labels or natives) as the
// program of version v wrote it: its header cut to size.
func asVersion(b []byte, v uint16, size int) []byte {
	out := append(append([]byte(nil), b[:size]...), b[headerSize:]...)
	binary.LittleEndian.PutUint16(out[4:], v)
	binary.LittleEndian.PutUint16(out[6:], uint16(size))
	binary.LittleEndian.PutUint32(out[8:], uint32(len(out)))
	return out
}

// TestDecodeAllocVersions: an allocation sample of version 14 has its
// window, slot and number, and once SetAllocClass named its class, the
// class; one of version 12 has its window and no slot; one of version 10
// (no window in its header) has its objects and bytes and window 0;
// WeighAlloc multiplies objects and bytes, rounding, and refuses a sample
// that is not of allocations.
func TestDecodeAllocVersions(t *testing.T) {
	v14 := allocSeed(2, 1638, 1638*40, 7)
	p, err := Decode(v14)
	if err != nil || p.Flags&Alloc == 0 || p.Period != 1638 || p.AllocBytes != 1638*40 || p.AllocWindow != 7 || len(p.Frames) != 2 ||
		p.AllocSlot != 0x7f0000200028 || p.AllocSeq != 5 || p.AllocClass != 0 || p.Flags&AllocClassed != 0 {
		t.Fatalf("version 14: %+v, %v", p, err)
	}
	if k, err := AllocKeyOf(v14); err != nil || k != (AllocKey{Window: 7, Seq: 5, Slot: 0x7f0000200028}) {
		t.Errorf("key %+v, %v", k, err)
	}
	if err := SetAllocClass(v14, 99); err != nil {
		t.Fatal(err)
	}
	if p, err = Decode(v14); err != nil || p.Flags&AllocClassed == 0 || p.AllocClass != 99 || p.Period != 1638 {
		t.Fatalf("version 14 with its class: %+v, %v", p, err)
	}
	if err := SetAllocClass(payloadSeed(1), 99); err == nil {
		t.Error("a CPU sample given a class: no error")
	}
	v12 := asVersion(v14, 12, headerSizeV12)
	if p, err = Decode(v12); err != nil || p.AllocWindow != 7 || p.AllocSlot != 0 || p.AllocSeq != 0 || p.Flags&AllocClassed != 0 || p.AllocClass != 0 {
		t.Fatalf("version 12: %+v, %v", p, err)
	}
	if err := SetAllocClass(v12, 99); err == nil {
		t.Error("a version 12 sample given a class: no error")
	}
	v10 := asVersion(v14, 10, headerSizeV10)
	p, err = Decode(v10)
	if err != nil || p.Flags&Alloc == 0 || p.Period != 1638 || p.AllocBytes != 1638*40 || p.AllocWindow != 0 || p.Frames[1].PC != 0x7f0000100008 {
		t.Fatalf("version 10: %+v, %v", p, err)
	}
	v8 := asVersion(v14, 8, headerSizeV8)
	if p, err = Decode(v8); err != nil || p.Flags&Alloc != 0 || p.AllocBytes != 0 {
		t.Fatalf("version 8: %+v, %v", p, err)
	}
	short := asVersion(v14, 12, headerSizeV10)
	if _, err := Decode(short); err == nil {
		t.Error("version 12 with version 10's header: no error")
	}
	if _, err := Decode(asVersion(v14, 14, headerSizeV12)); err == nil {
		t.Error("version 14 with version 12's header: no error")
	}
	objects, err := WeighAlloc(v12, 2.5)
	if p, _ = Decode(v12); err != nil || objects != 4095 || p.Period != 4095 || p.AllocBytes != 163800 || p.AllocWindow != 7 {
		t.Fatalf("weighed 2.5: %d objects, %+v, %v", objects, p, err)
	}
	if _, err := WeighAlloc(payloadSeed(1), 2); err == nil {
		t.Error("a CPU sample weighed as allocations: no error")
	}
}
