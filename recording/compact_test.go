package recording

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
)

// TestRecordingCompact: a recording of a deep block-heavy Ruby writes
// every sample compact, and its samples expand, in file order, to payloads
// that a fresh encoder makes compact again byte for byte: what the file
// holds is what the program wrote (named), at a fraction of its size.
func TestRecordingCompact(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.1-bookworm")
	script, _ := filepath.Abs("../testdata/ruby/nativedeep.rb")
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	if _, err := Record(context.Background(), Options{Command: []string{r.Exe, script, "30"}, Frequency: 499,
		Duration: 2 * time.Second, Output: out, NativeTables: true, StackSize: -1}); err != nil {
		t.Fatal(err)
	}
	f, err := perfdata.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Only(perfdata.RecordSample)
	var dec payload.TreeDecoder
	var enc payload.TreeEncoder
	var n, compact, written, expanded, frames, natives int
	for f.Next() {
		s := f.Record().(*perfdata.Sample)
		n++
		length := int(binary.LittleEndian.Uint32(s.Raw[8:]))
		raw, err := dec.Expand(s.Raw)
		if err != nil {
			t.Fatalf("sample %d: %v", n, err)
		}
		p, err := payload.Decode(raw)
		if err != nil {
			t.Fatalf("sample %d expanded: %v", n, err)
		}
		if flags := binary.LittleEndian.Uint32(s.Raw[16:]); flags&payload.Compact == 0 {
			continue
		}
		compact++
		written += length
		expanded += len(raw)
		frames += len(p.Frames)
		natives += len(p.Natives)
		again, err := enc.Compact(nil, raw, math.MaxInt)
		if err != nil || !bytes.Equal(again, s.Raw[:length]) {
			t.Fatalf("sample %d made compact again: %v\n% x\nwant\n% x", n, err, again[:min(len(again), 96)], s.Raw[:min(length, 96)])
		}
	}
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 300 || compact < n*99/100 {
		t.Fatalf("%d samples, %d compact", n, compact)
	}
	t.Logf("%d samples: %.0f Ruby and %.0f native frames, %d payload bytes a sample as written, %d expanded",
		n, float64(frames)/float64(compact), float64(natives)/float64(compact), written/compact, expanded/compact)
	if frames < 50*compact || written*5 > expanded {
		t.Errorf("%d frames in %d samples, %d bytes compact of %d: want a deep stack at a fifth or less", frames, compact, written, expanded)
	}
}
