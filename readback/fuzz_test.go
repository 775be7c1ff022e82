package readback

import (
	"bytes"
	"compress/gzip"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/native"
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

// FuzzDecodeKallsyms feeds arbitrary bytes, gzipped or not, to the kernel
// symbol table's decoder (FeatureKallsyms, a section of any perf.data a
// user opens): errors, never a panic, no more allocated than allocPerByte
// a byte of the text it may read (maxKallsymsRatio times the section, a
// section that decompresses past it refused), and no symbol without a name.
func FuzzDecodeKallsyms(f *testing.F) {
	f.Add([]byte("ffffffff81000000 T _stext\nffffffff81000010 t helper\t[mod]\n0000000000000000 T hidden\nffffffff81000020 D data\n"), true)
	f.Add([]byte("81000000 W weak\nnot a line\n\n"), true)
	f.Add([]byte(strings.Repeat("ffffffff81000000 T a\n", 16)), true)
	f.Add([]byte(strings.Repeat("x", 1100)), true)
	f.Add(gzipped([]byte(strings.Repeat("ffffffff81000000 T a\n", 1<<12))), false)
	f.Fuzz(func(t *testing.T, data []byte, zip bool) {
		if zip {
			data = gzipped(data)
		}
		limit := min(int64(len(data))*maxKallsymsRatio+64<<10, MaxKallsyms)
		text := min(gunzippedLen(data, limit), limit+1)
		var k *native.Kernel
		var err error
		checkAllocated(t, "a kernel symbol table", allocated(func() { k, err = decodeKallsyms(data) }), text)
		if text > limit && err == nil {
			t.Fatalf("%d bytes of section decompressing past %d decode", len(data), limit)
		}
		if err != nil {
			return
		}
		if name, _, ok := k.Symbol(^uint64(0)); ok && name == "" {
			t.Fatalf("a symbol without a name")
		}
	})
}
