package recording

import (
	"encoding/binary"
	"testing"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/symtab"
)

// TestNewFrames: a sample is looked up only above the part of its stack
// (the bottom) it shares with its thread's previous sample of the same GC
// interval; the names of the shared part are that sample's.
func TestNewFrames(t *testing.T) {
	f := func(iseqs ...uint64) []payload.Frame { // leaf first
		out := make([]payload.Frame, len(iseqs))
		for i, is := range iseqs {
			out[i] = payload.Frame{Iseq: is, PC: is + 1}
		}
		return out
	}
	s := &session{symtab: symtab.New()}
	steps := []struct {
		pid, tid uint32
		frames   []payload.Frame
		want     int // frames returned: the top ones
	}{
		{1, 1, f(3, 2, 1), 3},    // first sample of the thread: all
		{1, 1, f(3, 2, 1), 0},    // the same stack: none
		{1, 1, f(5, 4, 2, 1), 2}, // a new top over 2, 1
		{1, 2, f(5, 4, 2, 1), 4}, // another thread: its own history
		{2, 1, f(5, 4, 2, 1), 4}, // another process with the same tid
		{1, 1, f(1), 0},          // shallower: the bottom frame was seen
		{1, 1, f(9, 2, 1), 2},    // the history is the last sample only
		{1, 1, nil, 0},
		{1, 1, f(3, 2, 1), 3},
		{1, 1, f(3, 2, 1), 3}, // another GC interval: all again
		{1, 1, f(3, 2, 1), 0}, // the same one: none
		{1, 1, f(3, 2, 1), 3}, // environments walked: all again
		{1, 1, f(3, 2, 1), 0},
		{1, 1, f(3, 2, 1), 3}, // OldStale: the same bytes decode otherwise
		{1, 1, f(3, 2, 1), 0},
	}
	// The steps whose environment chains the recorder walked on, and those
	// whose payload had OldStale.
	walked, stale := map[int]bool{11: true}, map[int]bool{13: true, 14: true}
	for i, st := range steps {
		p := &payload.Payload{PID: st.pid, TID: st.tid, Frames: st.frames}
		if i >= 9 {
			// Another GC interval: the names of the last sample may not hold.
			p.GC = payload.GCStamp{Stamped: true, Count: 9}
		}
		if stale[i] {
			p.Flags |= payload.OldStale
		}
		got := s.newFrames(p, frameBytes(st.frames), walked[i])
		s.nameSample(p, nil, s.symtab.NameIDs(got, nil))
		if n := len(s.lastFrames[threadKey{p.PID, p.TID, p.Gen}].ids); n != len(st.frames) {
			t.Errorf("step %d: %d names kept for %d frames", i, n, len(st.frames))
		}
		if len(got.Frames) != st.want || got.PID != st.pid {
			t.Errorf("step %d: %d frames of pid %d, want %d", i, len(got.Frames), got.PID, st.want)
			continue
		}
		for j := range got.Frames {
			if got.Frames[j] != st.frames[j] {
				t.Errorf("step %d: frame %d is %+v, want the payload's top frames", i, j, got.Frames[j])
			}
		}
	}
}

// frameBytes is frames as the program writes them (iseq, pc, cme), leaf
// first.
func frameBytes(frames []payload.Frame) []byte {
	var b []byte
	for _, f := range frames {
		b = binary.LittleEndian.AppendUint64(b, f.Iseq)
		b = binary.LittleEndian.AppendUint64(b, f.PC)
		b = binary.LittleEndian.AppendUint64(b, f.CME)
	}
	return b
}
