package recording

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/symtab"
)

// TestDecodedAsWritten: each sample's payload as the recorder decoded and
// named it, with the frames it shares with its thread's sample before
// taken as that one left them (decodeSample), is the payload its named
// bytes decode to, and each frame's name is the one the symbol table has
// for the frame as the program wrote it: on a deep block-heavy program and
// one whose GC runs hundreds of times a second (new GC intervals, OldStale,
// environments walked by the recorder).
func TestDecodedAsWritten(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.1-bookworm")
	for _, c := range []struct {
		script string
		share  float64 // of the frames, at least, named as the sample before
		walked bool    // some samples walked by the recorder
	}{
		{"nativedeep.rb", 0.5, false},
		{"gcpressure.rb", 0.1, true}, // measured 0.28: new GC intervals, walked samples
	} {
		script := c.script
		t.Run(script, func(t *testing.T) {
			path, _ := filepath.Abs(filepath.Join("..", "testdata", "ruby", script))
			var (
				n, walked, shared, frames, checked, unnamed int
				last                                        = map[[2]uint32][]byte{}
				fresh, written                              payload.Payload
				ids                                         []uint64
			)
			check := func(s *session, before []byte, p *payload.Payload, raw []byte) {
				n++
				if p.Flags&payload.Named == 0 {
					return // not named: its frames were decoded whole
				}
				if err := payload.DecodeInto(&fresh, before); err != nil {
					t.Fatalf("sample %d as written: %v", n, err)
				}
				if err := payload.DecodeInto(&written, raw); err != nil {
					t.Fatalf("sample %d: %v", n, err)
				}
				if fresh.EnvsLeft > 0 {
					walked++ // walked by the recorder: its frames are not its bytes'
				} else if !reflect.DeepEqual(*p, written) {
					for i := range min(len(p.Frames), len(written.Frames)) {
						if p.Frames[i] != written.Frames[i] {
							t.Fatalf("sample %d, frame %d of %d: decoded %+v, its bytes say %+v", n, i, len(p.Frames), p.Frames[i], written.Frames[i])
						}
					}
					t.Fatalf("sample %d: decoded %+v, its bytes say %+v", n, *p, written)
				}
				// The names: those of the frames as the program wrote them
				// (where it could read them).
				ids = s.symtab.NameIDs(&fresh, ids[:0])
				for i, f := range fresh.Frames {
					if f.Error {
						continue
					}
					checked++
					switch got := p.Frames[i].Iseq; {
					case got >= symtab.NameFirst && got != ids[i]:
						t.Fatalf("sample %d, frame %d of %d: named %d, its frame %+v is %d in the table", n, i, len(p.Frames), got, f, ids[i])
					case got < symtab.NameFirst && ids[i] >= symtab.NameFirst:
						// Not proven for the sample (symtab.Resolve), or
						// named as the sample before had it, and named
						// since: rare, unless frames are looked up wrong.
						unnamed++
					}
				}
				b, _ := payload.FrameBytes(raw)
				k := [2]uint32{p.PID, p.TID}
				shared += payload.SharedOutermost(last[k], b)
				frames += len(p.Frames)
				last[k] = append(last[k][:0], b...)
			}
			if _, err := Record(context.Background(), Options{Command: []string{r.Exe, path, "30"}, Frequency: 999,
				Duration: 2 * time.Second, NativeTables: true, StackSize: -1, Output: filepath.Join(t.TempDir(), "rubyperf.data"),
				sampleTaken: check}); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d samples, %d walked; %d frames (%d names checked), %d of them named as the sample before had them", n, walked, frames, checked, shared)
			t.Logf("%d frames unnamed that the table names", unnamed)
			if unnamed > checked/100 {
				t.Errorf("%d of %d frames unnamed that the table names", unnamed, checked)
			}
			if n < 500 || float64(shared) < c.share*float64(frames) || checked < frames*3/4 || c.walked && walked == 0 {
				t.Errorf("%d samples (%d walked), %d of %d frames shared, %d names checked: want 500 samples, %.0f%% shared, 3/4 checked",
					n, walked, shared, frames, checked, 100*c.share)
			}
		})
	}
}
