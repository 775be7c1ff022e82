package rubystack

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestNoteEpoch: an epoch's major GC count is kept only from a read that
// cannot be torn by a GC starting under it.
func TestNoteEpoch(t *testing.T) {
	counts := func(minor, major uint64) []byte {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, minor)
		binary.LittleEndian.PutUint64(b[8:], major)
		return b
	}
	same := func(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }
	for _, c := range []struct {
		name  string
		s     GCStamp
		buf   []byte
		again func() ([]byte, error)
		want  bool
	}{
		{"after minor GCs", GCStamp{Count: 10, Epoch: 6}, counts(7, 3), nil, true},
		{"a major GC marking", GCStamp{Count: 10, Epoch: 10, Marking: true}, counts(7, 3), nil, true},
		{"a minor GC marking", GCStamp{Count: 11, Epoch: 10, Marking: true}, counts(8, 3), nil, false},
		{"a GC started, its kind not counted yet", GCStamp{Count: 11, Epoch: 10}, counts(7, 3), nil, false},
		{"a major GC counted, its epoch not set yet", GCStamp{Count: 11, Epoch: 10, Marking: true}, counts(7, 4), nil, false},
		{"no major GC yet", GCStamp{Count: 3}, counts(3, 0), nil, false},
		{"the second read differs", GCStamp{Count: 10, Epoch: 6}, counts(7, 3), same(counts(7, 4)), false},
		{"the second read fails", GCStamp{Count: 10, Epoch: 6}, counts(7, 3), func() ([]byte, error) { return nil, errors.New("gone") }, false},
	} {
		r := &Reader{Layout: &rubybuild.Layout{}}
		r.Layout.GC.MinorCount, r.Layout.GC.MajorCount = 0, 8
		again := c.again
		if again == nil {
			again = same(c.buf)
		}
		r.noteEpoch(c.s, c.buf, 0, again)
		m, ok := r.MajorsAt(c.s.Epoch)
		if ok != c.want || ok && m != binary.LittleEndian.Uint64(c.buf[8:]) {
			t.Errorf("%s: MajorsAt(%d) = %d, %v; want known %v", c.name, c.s.Epoch, m, ok, c.want)
		}
	}
}

// TestEpochsBounded: the oldest epochs go past maxEpochs.
func TestEpochsBounded(t *testing.T) {
	var e epochs
	for i := uint64(1); i <= maxEpochs+10; i++ {
		e.add(10*i, i)
	}
	if len(e.majors) != maxEpochs || len(e.order) != maxEpochs {
		t.Fatalf("%d epochs kept (%d in order), want %d", len(e.majors), len(e.order), maxEpochs)
	}
	if _, ok := e.majors[10]; ok {
		t.Errorf("the oldest epoch is still kept")
	}
	if m, ok := e.majors[10*(maxEpochs+10)]; !ok || m != maxEpochs+10 {
		t.Errorf("the newest epoch: %d, %v", m, ok)
	}
}
