package payload

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// stackSeed builds a payload of thread tid: its Ruby frames named by
// frames (leaf first; frame i's iseq, pc and cme derive from frames[i]),
// its native PCs, and labels labels.
func stackSeed(tid uint32, frames []uint64, natives []uint64, labels int) []byte {
	b := labelledSeed(len(frames), labels)
	binary.LittleEndian.PutUint32(b[24:], tid)
	for i, f := range frames {
		fb := b[headerSize+i*frameSize:]
		binary.LittleEndian.PutUint64(fb[0:], 0x7f0000001000+f*64)
		binary.LittleEndian.PutUint64(fb[8:], 0x7f0000100000+f*8)
		binary.LittleEndian.PutUint64(fb[16:], 0x7f0000200000+f*64|frameFinish)
	}
	binary.LittleEndian.PutUint32(b[80:], uint32(len(natives)))
	binary.LittleEndian.PutUint32(b[84:], uint32(NativeOutermost))
	for _, pc := range natives {
		b = binary.LittleEndian.AppendUint64(b, pc)
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)))
	return b
}

// randomStack is a stack of depth frames below a common outer part, its
// leaf varying: as a program's samples are.
func randomStack(r *rand.Rand, depth int) (frames, natives []uint64) {
	for i := range depth {
		frames = append(frames, uint64(depth-i)) // outermost: 1
	}
	frames[0] = 1000 + uint64(r.IntN(50)) // the leaf's pc varies
	for i := range depth / 3 {
		natives = append(natives, 0x5500_0000+uint64(depth/3-i)*16)
	}
	if len(natives) > 0 {
		natives[0] += uint64(r.IntN(20))
	}
	return frames, natives
}

// TestTreeRoundTrip: compact payloads expand, in order, to exactly the
// payloads they were made of, and a stack seen before costs a few bytes.
func TestTreeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var enc TreeEncoder
	var dec TreeDecoder
	var full, compact int
	for i := range 2000 {
		frames, natives := randomStack(r, 1+r.IntN(200))
		raw := stackSeed(uint32(1+i%3), frames, natives, r.IntN(3))
		c, err := enc.Compact(nil, raw, math.MaxInt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(c); err != ErrCompact {
			t.Fatalf("sample %d: decoding a compact payload: %v", i, err)
		}
		got, err := dec.Expand(append(c, 0, 0, 0, 0)) // RAW padding
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if !bytes.Equal(got, raw) {
			t.Fatalf("sample %d expanded:\n% x\nwant\n% x", i, got[:min(len(got), 128)], raw[:min(len(raw), 128)])
		}
		if _, err := Decode(got); err != nil {
			t.Fatal(err)
		}
		if i >= 1000 {
			full += len(raw)
			compact += len(c)
		}
	}
	// Once the trees hold the outer parts, a sample costs its header, its
	// labels and about its leaf.
	if avg := compact / 1000; avg > headerSize+treeHeaderSize+2*labelSize+frameSize+2*8 {
		t.Errorf("%d bytes a sample once compact (%d as written)", avg, full/1000)
	}
	t.Logf("%d bytes a sample, %d compact", full/1000, compact/1000)
}

// TestTreeTooLarge: a payload the caller has no room for made compact
// changes nothing: the next ones expand as they were.
func TestTreeTooLarge(t *testing.T) {
	var enc TreeEncoder
	var dec TreeDecoder
	for i, limit := range []int{math.MaxInt, 100, math.MaxInt, 100, math.MaxInt} {
		raw := stackSeed(1, []uint64{uint64(10 + i), 2, 1}, []uint64{uint64(20 + i), 8}, 0)
		c, err := enc.Compact(nil, raw, limit)
		if limit < math.MaxInt {
			if err != ErrTooLarge {
				t.Fatalf("sample %d: %v, want ErrTooLarge", i, err)
			}
			continue
		}
		got, err := dec.Expand(c)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("sample %d: %v", i, err)
		}
	}
}

// TestTreeReset: trees that would grow past MaxTreeNodes start afresh,
// and the reader follows.
func TestTreeReset(t *testing.T) {
	var enc TreeEncoder
	var dec TreeDecoder
	frames := make([]uint64, MaxFrames)
	resets := 0
	for i := range 2 * MaxTreeNodes / MaxFrames {
		for j := range frames {
			frames[j] = uint64(i*MaxFrames + j) // every frame new
		}
		raw := stackSeed(1, frames, nil, 0)
		c, err := enc.Compact(nil, raw, math.MaxInt)
		if err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint32(c[headerSize:])&treeReset != 0 {
			resets++
		}
		got, err := dec.Expand(c)
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("sample %d: %v", i, err)
		}
		if len(enc.ruby) > MaxTreeNodes || len(dec.ruby) > MaxTreeNodes {
			t.Fatalf("trees of %d and %d nodes", len(enc.ruby), len(dec.ruby))
		}
	}
	if resets < 2 {
		t.Errorf("%d resets", resets)
	}
}

// TestTreeRefusesHostile: a compact payload that refers to nodes it does
// not have, or to a stack of another depth, is an error and adds nothing.
func TestTreeRefusesHostile(t *testing.T) {
	var enc TreeEncoder
	first, _ := enc.Compact(nil, stackSeed(1, []uint64{3, 2, 1}, []uint64{9, 8}, 0), math.MaxInt)
	second, _ := enc.Compact(nil, stackSeed(1, []uint64{4, 2, 1}, []uint64{7, 8}, 1), math.MaxInt)
	le := binary.LittleEndian
	for name, mangle := range map[string]func(b []byte){
		"leaf past the tree":    func(b []byte) { le.PutUint32(b[headerSize+4:], 99) },
		"native leaf past":      func(b []byte) { le.PutUint32(b[headerSize+8:], 99) },
		"deeper than told":      func(b []byte) { le.PutUint32(b[12:], 2) },
		"shallower than told":   func(b []byte) { le.PutUint32(b[12:], 4) },
		"more nodes than fit":   func(b []byte) { le.PutUint32(b[headerSize+12:], 3) },
		"more natives than fit": func(b []byte) { le.PutUint32(b[headerSize+16:], 2) },
		"not compact version":   func(b []byte) { le.PutUint16(b[4:], Version) },
	} {
		var dec TreeDecoder
		if _, err := dec.Expand(first); err != nil {
			t.Fatal(err)
		}
		bad := append([]byte(nil), second...)
		mangle(bad)
		if _, err := dec.Expand(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
		if len(dec.ruby) != 3 || len(dec.native) != 2 {
			t.Errorf("%s: trees of %d and %d nodes after an error", name, len(dec.ruby), len(dec.native))
		}
		if _, err := dec.Expand(second); err != nil {
			t.Errorf("%s: the sample as written, after: %v", name, err)
		}
	}
}

// FuzzExpandTree: whatever a file holds, expanding it never panics nor
// grows the trees past their bound, and what it expands decodes.
func FuzzExpandTree(f *testing.F) {
	var enc TreeEncoder
	first, _ := enc.Compact(nil, stackSeed(1, []uint64{3, 2, 1}, []uint64{9, 8}, 1), math.MaxInt)
	second, _ := enc.Compact(nil, stackSeed(2, []uint64{5, 2, 1}, []uint64{6, 8}, 0), math.MaxInt)
	f.Add(first, second)
	f.Add(second, first)
	f.Add(payloadSeed(2), second)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var dec TreeDecoder
		for _, raw := range [][]byte{a, b} {
			got, err := dec.Expand(raw)
			if err != nil {
				continue
			}
			if _, err := Decode(got); err != nil {
				t.Fatalf("expanded to a payload that does not decode: %v", err)
			}
			if len(dec.ruby) > MaxTreeNodes || len(dec.native) > MaxTreeNodes {
				t.Fatalf("trees of %d and %d nodes", len(dec.ruby), len(dec.native))
			}
		}
	})
}

// BenchmarkCompact: the recorder's cost of making a 200-frame sample
// compact, its stack as the thread's last but for the leaf.
func BenchmarkCompact(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var raws [][]byte
	for range 64 {
		frames, natives := randomStack(r, 200)
		raws = append(raws, stackSeed(1, frames, natives, 0))
	}
	var enc TreeEncoder
	var dst []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var err error
		if dst, err = enc.Compact(dst[:0], raws[i%len(raws)], math.MaxInt); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTreeAlloc: an allocation sample made compact expands to itself,
// window, slot and class and all; one of an older recording's compact form
// (version 13, whose program wrote version 12) expands with its window and
// no slot; one of version 11 (version 10's) with its objects and bytes,
// and window 0.
func TestTreeAlloc(t *testing.T) {
	raw := allocSeed(3, 409, 409*160, 42)
	if err := SetAllocClass(raw, 7); err != nil {
		t.Fatal(err)
	}
	var e TreeEncoder
	c, err := e.Compact(nil, raw, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	var d TreeDecoder
	got, err := d.Expand(c)
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("expanded %x, %v; want %x", got, err, raw)
	}
	le := binary.LittleEndian
	v13 := append(append([]byte(nil), c[:headerSizeV12]...), c[headerSize:]...)
	le.PutUint16(v13[4:], CompactVersionV12)
	le.PutUint16(v13[6:], uint16(headerSizeV12))
	le.PutUint32(v13[8:], uint32(len(v13)))
	var d13 TreeDecoder
	if got, err = d13.Expand(v13); err != nil {
		t.Fatal(err)
	}
	p, err := Decode(got)
	if err != nil || p.AllocWindow != 42 || p.AllocSlot != 0 || p.AllocClass != 0 || p.Flags&AllocClassed != 0 || len(p.Frames) != 3 {
		t.Fatalf("version 13: %+v, %v", p, err)
	}
	v11 := append(append([]byte(nil), c[:headerSizeV10]...), c[headerSize:]...)
	le.PutUint16(v11[4:], CompactVersionV10)
	le.PutUint16(v11[6:], uint16(headerSizeV10))
	le.PutUint32(v11[8:], uint32(len(v11)))
	var d11 TreeDecoder
	got, err = d11.Expand(v11)
	if err != nil {
		t.Fatal(err)
	}
	p, err = Decode(got)
	if err != nil || p.Flags&Alloc == 0 || p.Period != 409 || p.AllocBytes != 409*160 || p.AllocWindow != 0 || len(p.Frames) != 3 {
		t.Fatalf("version 11: %+v, %v", p, err)
	}
}

// TestSharedOutermost: the frames two samples end with alike, counted as
// one frame at a time would, whatever the lengths and where they differ.
func TestSharedOutermost(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := r.IntN(70)
		a := make([]byte, n*frameSize)
		for i := range a {
			a[i] = byte(r.IntN(3))
		}
		b := append([]byte(nil), a[r.IntN(n+1)*frameSize:]...)
		if len(b) > 0 && r.IntN(2) == 0 {
			b[r.IntN(len(b))] ^= 0x80 // one byte of one frame differs
		}
		want := 0
		for want < len(a)/frameSize && want < len(b)/frameSize &&
			bytes.Equal(a[len(a)-(want+1)*frameSize:len(a)-want*frameSize], b[len(b)-(want+1)*frameSize:len(b)-want*frameSize]) {
			want++
		}
		if got := SharedOutermost(a, b); got != want {
			t.Fatalf("%d and %d frames: %d shared, want %d", len(a)/frameSize, len(b)/frameSize, got, want)
		}
	}
}
