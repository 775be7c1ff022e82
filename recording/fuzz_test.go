package recording

import (
	"bytes"
	"compress/gzip"
	"github.com/rubyperf/rubyperf/bpf"
	"testing"
)

// FuzzDecodeSymbolTable feeds arbitrary bytes, gzipped or not, to the
// Ruby symbol table's decoder (a section of any perf.data a user opens):
// errors, never a panic, and what decodes encodes again.
func FuzzDecodeSymbolTable(f *testing.F) {
	t := NewSymbolTable()
	k := FrameKey{PID: 1, Gen: 2, Iseq: 0x1000, PC: 0x2000}
	t.Frames[k] = []Named{{FrameInfo: FrameInfo{Label: "Object#m", Path: "a.rb", HasPath: true, Line: 3}, Span: bpf.FullSpan},
		{FrameInfo: FrameInfo{Label: "Object#n", Path: "a.rb", HasPath: true, Line: 9}, Span: bpf.Span{Epoch: 4, From: 11, To: 11}}}
	t.VMExec[Image{1, 2}] = VMExec{Path: "/lib/libruby.so", Start: 10, End: 20}
	good, err := t.Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add([]byte(`{"version":1,"frames":[{"pid":1,"label":"x"}],"vm_exec":[{"pid":1,"gen":4}]}`), true)
	f.Add([]byte(`{"version":2}`), true)
	f.Add([]byte(`[]`), true)
	f.Fuzz(func(t *testing.T, data []byte, zip bool) {
		if zip {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(data)
			zw.Close()
			data = buf.Bytes()
		}
		st, err := DecodeSymbolTable(data)
		if err != nil {
			return
		}
		if _, err := st.Encode(); err != nil {
			t.Fatalf("a decoded table does not encode: %v", err)
		}
	})
}
