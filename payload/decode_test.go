package payload

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestDecodeFrames: a thread's samples decoded as the recorder decodes them
// (the outermost frames a sample shares with the one before taken as that
// one left them, named) equal the same samples decoded whole, once named
// alike: with frames that carry old-generation bits, C frames, OldStale
// coming and going, environments left to walk, and stacks that grow past
// the storage.
func TestDecodeFrames(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var (
		p, whole  Payload
		buf       []Frame
		prevBytes []byte
		prevStale bool
		prevEnvs  bool
		reused    int
	)
	// A frame's name, from its bytes as the program wrote them (the
	// recorder gives a shared frame the name it had before).
	name := func(raw []byte, q *Payload) {
		ids := make([]uint64, len(q.Frames))
		for i := range ids {
			f := raw[headerSize+i*frameSize:]
			ids[i] = binary.LittleEndian.Uint64(f) ^ binary.LittleEndian.Uint64(f[8:])<<1 ^ 0x5a5a
		}
		if err := NameFrames(raw, q, ids); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3000 {
		depth := 1 + r.IntN(40)
		if i%500 == 499 {
			depth = 150 + r.IntN(100) // past what the storage had
		}
		frames, natives := randomStack(r, depth)
		raw := stackSeed(1, frames, natives, 0)
		for k := range depth {
			f := raw[headerSize+k*frameSize:]
			switch r.IntN(8) {
			case 0: // a Ruby frame's old-generation bits
				binary.LittleEndian.PutUint64(f[8:], binary.LittleEndian.Uint64(f[8:])|uint64(r.IntN(8)))
			case 1: // a C frame
				binary.LittleEndian.PutUint64(f[8:], 0)
				binary.LittleEndian.PutUint64(f[16:], binary.LittleEndian.Uint64(f[16:])|frameCFrame)
			case 2:
				if k < 3 && r.IntN(20) == 0 { // an environment left to walk, near the leaf
					binary.LittleEndian.PutUint64(f[16:], binary.LittleEndian.Uint64(f[16:])|frameError)
				}
			}
		}
		stale := r.IntN(30) == 0
		if stale {
			binary.LittleEndian.PutUint32(raw[16:], binary.LittleEndian.Uint32(raw[16:])|OldStale)
		}
		fresh := append([]byte(nil), raw...)

		d, err := DecodeHeader(&p, raw)
		if err != nil {
			t.Fatal(err)
		}
		known := 0
		if prevBytes != nil && prevStale == stale && !prevEnvs {
			known = SharedOutermost(prevBytes, d.Bytes)
		}
		buf = DecodeFrames(&p, d, buf, known)
		if known > 0 && p.EnvsLeft > 0 {
			buf = DecodeFrames(&p, d, buf, 0) // walked: shares nothing
		} else {
			reused += known
		}
		prevBytes, prevStale, prevEnvs = append(prevBytes[:0], d.Bytes...), stale, p.EnvsLeft > 0
		name(raw, &p)

		if err := DecodeInto(&whole, fresh); err != nil {
			t.Fatal(err)
		}
		name(fresh, &whole)
		if !reflect.DeepEqual(p, whole) {
			for k := range min(len(p.Frames), len(whole.Frames)) {
				if p.Frames[k] != whole.Frames[k] {
					t.Errorf("sample %d, frame %d of %d (%d known): %+v, decoded whole %+v", i, k, depth, known, p.Frames[k], whole.Frames[k])
					break
				}
			}
			t.Fatalf("sample %d (%d known): %+v, decoded whole %+v", i, known, p, whole)
		}
	}
	if reused == 0 {
		t.Fatal("no frame was taken from the sample before")
	}
	t.Logf("%d frames taken from the sample before", reused)
}

// BenchmarkDecodeFrames: BenchmarkDecodeInto's sample after one that shares
// all its frames but the leaf, as the recorder decodes a thread's samples.
func BenchmarkDecodeFrames(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	frames, natives := randomStack(r, 200)
	raw := stackSeed(1, frames, natives, 0)
	var p Payload
	d, err := DecodeHeader(&p, raw)
	if err != nil {
		b.Fatal(err)
	}
	buf := DecodeFrames(&p, d, nil, 0)
	b.ReportAllocs()
	for b.Loop() {
		d, err := DecodeHeader(&p, raw)
		if err != nil {
			b.Fatal(err)
		}
		buf = DecodeFrames(&p, d, buf, len(frames)-1)
	}
}
