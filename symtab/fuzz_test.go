package symtab

import (
	"bytes"
	"compress/gzip"
	"io"
	"runtime"
	"testing"

	"github.com/rubyperf/rubyperf/payload"
)

// allocPerByte bounds what decoding a section may allocate (garbage
// included) per byte of text it reads, and allocSlack what it may besides.
// The densest real tables measured cost about 40 (a table of the shortest
// distinct names); a parse bomb costs more: empty frames cost the decoder
// before issue 27 over 140 bytes a byte (TestDecodeBombsAllocate).
const (
	allocPerByte = 64
	allocSlack   = 1 << 20
)

// allocated is the bytes fn allocates, garbage included.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// gunzippedLen is the length of b gunzipped, read no further than max+1
// bytes (0 when b is not gzip).
func gunzippedLen(b []byte, max int64) int64 {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return 0
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, max+1))
	return n
}

// gzipped is b gzipped.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// checkAllocated fails t when decoding what allocated over allocPerByte a
// byte of the text it could read.
func checkAllocated(t *testing.T, what string, got uint64, text int64) {
	t.Helper()
	if limit := uint64(text)*allocPerByte + allocSlack; got > limit {
		t.Fatalf("decoding %s of %d bytes of text allocated %d bytes, over %d", what, text, got, limit)
	}
}

// FuzzDecodeSymbolTable feeds arbitrary bytes, gzipped or not, to the
// Ruby symbol table's decoder (a section of any perf.data a user opens):
// errors, never a panic, no more allocated than allocPerByte a byte of
// text read, and what decodes encodes again, and decodes the same.
func FuzzDecodeSymbolTable(f *testing.F) {
	t := New()
	k := FrameKey{PID: 1, Gen: 2, Iseq: 0x1000, PC: 0x2000}
	t.Frames[k] = []Named{{FrameInfo: FrameInfo{Label: "Object#m", Path: "a.rb", HasPath: true, Line: 3}, Span: payload.FullSpan},
		{FrameInfo: FrameInfo{Label: "Object#n", Path: "a.rb", HasPath: true, Line: 9}, Span: payload.Span{Epoch: 4, From: 11, To: 11}}}
	t.VMExec[Image{1, 2}] = VMExec{Path: "/lib/libruby.so", Start: 10, End: 20}
	t.NameID(FrameInfo{Label: "Object#m", Path: "a.rb", HasPath: true, Line: 3})
	t.NameID(FrameInfo{Drop: true})
	good, err := t.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add([]byte(`{"version":1,"frames":[{"pid":1,"label":"x"}],"vm_exec":[{"pid":1,"gen":4,"start":1,"end":2}]}`), true)
	f.Add([]byte(`{"version":2}`), true)
	f.Add([]byte(`[]`), true)
	f.Add([]byte(`{"version":3,"names":[{},{"line":1},{"label":"a","x":[1,{"y":2}]}],"later":{"a":[]}}`), true)
	f.Fuzz(func(t *testing.T, data []byte, zip bool) {
		if zip {
			data = gzipped(data)
		}
		text := gunzippedLen(data, MaxBytes)
		var st *Table
		var err error
		checkAllocated(t, "a Ruby symbol table", allocated(func() { st, err = Decode(data) }), text)
		if text > MaxBytes && err == nil {
			t.Fatalf("a table decompressing past %d bytes decodes", MaxBytes)
		}
		if err != nil {
			return
		}
		again, err := st.Encode()
		if err != nil {
			t.Fatalf("a decoded table does not encode: %v", err)
		}
		st2, err := Decode(again)
		if err != nil {
			t.Fatalf("a decoded table, encoded, does not decode: %v", err)
		}
		if len(st2.Names) != len(st.Names) || len(st2.Frames) != len(st.Frames) || len(st2.VMExec) != len(st.VMExec) {
			t.Fatalf("a table decoded, encoded and decoded again has %d names, %d frames, %d VM entries; first %d, %d, %d",
				len(st2.Names), len(st2.Frames), len(st2.VMExec), len(st.Names), len(st.Frames), len(st.VMExec))
		}
	})
}
