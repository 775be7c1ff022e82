package bpf

import (
	"encoding/binary"
	"testing"
)

// payloadSeed builds a well-formed payload with n frames.
func payloadSeed(n int) []byte {
	b := make([]byte, headerSize+n*frameSize)
	binary.LittleEndian.PutUint32(b[0:], PayloadMagic)
	binary.LittleEndian.PutUint16(b[4:], PayloadVersion)
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

func TestDecodePayload(t *testing.T) {
	p, err := DecodePayload(append(payloadSeed(3), 0, 0, 0, 0)) // RAW padding
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Frames) != 3 || !p.Frames[2].Finish || p.Frames[2].CME != 0x7f0000200000 || p.Frames[1].PC != 0x7f0000100008 {
		t.Fatalf("payload %+v", p)
	}
	for _, bad := range [][]byte{nil, payloadSeed(2)[:headerSize+10], append([]byte{1}, payloadSeed(1)[1:]...)} {
		if _, err := DecodePayload(bad); err == nil {
			t.Errorf("no error for % x", bad[:min(len(bad), 16)])
		}
	}
}

func FuzzDecodePayload(f *testing.F) {
	f.Add(payloadSeed(0))
	f.Add(payloadSeed(5))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePayload(b)
		if err == nil && len(p.Frames) > MaxFrames {
			t.Fatalf("%d frames", len(p.Frames))
		}
	})
}

// FuzzNameFrames: the recorder's rewrite of a payload's frames into name
// ids never writes outside the payload, and what it accepts decodes with
// those ids and PayloadNamed, everything else as it was.
func FuzzNameFrames(f *testing.F) {
	f.Add(payloadSeed(0), uint8(0))
	f.Add(payloadSeed(5), uint8(5))
	f.Add(payloadSeed(5), uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(i) + 2
		}
		before, errBefore := DecodePayload(b)
		raw := append([]byte(nil), b...)
		if err := NameFrames(raw, ids); err != nil {
			return
		}
		if errBefore != nil {
			t.Fatalf("named a payload that does not decode: %v", errBefore)
		}
		after, err := DecodePayload(raw)
		if err != nil || after.Flags&PayloadNamed == 0 || len(after.Frames) != len(ids) {
			t.Fatalf("after naming: %+v, %v", after, err)
		}
		for i := range ids {
			if after.Frames[i].Iseq != ids[i] || after.Frames[i].PC != before.Frames[i].PC || after.Frames[i].CME != before.Frames[i].CME {
				t.Fatalf("frame %d: %+v, was %+v", i, after.Frames[i], before.Frames[i])
			}
		}
	})
}

func FuzzDecodeSample(f *testing.F) {
	seed := make([]byte, 0, 256)
	seed = binary.LittleEndian.AppendUint64(seed, 0x401000)         // ip
	seed = binary.LittleEndian.AppendUint64(seed, 7|7<<32)          // pid, tid
	seed = binary.LittleEndian.AppendUint64(seed, 12345)            // time
	seed = binary.LittleEndian.AppendUint64(seed, 1)                // cpu, res
	seed = binary.LittleEndian.AppendUint64(seed, 10101010)         // period
	seed = binary.LittleEndian.AppendUint64(seed, 1)                // callchain nr
	seed = binary.LittleEndian.AppendUint64(seed, 0x401000)         //
	raw := payloadSeed(1)                                           //
	seed = binary.LittleEndian.AppendUint32(seed, uint32(len(raw))) // raw size
	seed = append(seed, raw...)                                     //
	seed = binary.LittleEndian.AppendUint64(seed, 0)                // regs abi: none
	seed = binary.LittleEndian.AppendUint64(seed, 0)                // stack size 0
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSample(b)
		if err == nil && len(s.Callchain) > maxCallchain {
			t.Fatalf("callchain of %d", len(s.Callchain))
		}
	})
}
