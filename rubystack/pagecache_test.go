package rubystack

import (
	"encoding/binary"
	"testing"
)

// byteMemory is memory from address 0, for tests of pure logic.
type byteMemory struct {
	b     []byte
	reads int
}

func (m *byteMemory) ReadAt(p []byte, addr uint64) error {
	m.reads++
	copy(p, m.b[addr:])
	return nil
}

// TestPageCacheRefresh: a cache that is on serves what it read until
// refreshed, then reads memory again; refreshing one that is off leaves it
// off, so later reads go through. (Starting a cache that is on keeps its
// pages: the retries of a torn read once re-read the same stale pages.)
func TestPageCacheRefresh(t *testing.T) {
	mem := &byteMemory{b: make([]byte, 2*pageSize)}
	c := &pageCache{inner: mem}
	word := func() uint64 {
		var b [8]byte
		if err := c.ReadAt(b[:], 16); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	c.start()
	binary.LittleEndian.PutUint64(mem.b[16:], 1)
	if w := word(); w != 1 {
		t.Fatalf("read %d, want 1", w)
	}
	binary.LittleEndian.PutUint64(mem.b[16:], 2)
	c.start()
	if w := word(); w != 1 {
		t.Fatalf("a cache started again read %d: want its page, 1", w)
	}
	c.refresh()
	if w := word(); w != 2 {
		t.Fatalf("a refreshed cache read %d, want 2", w)
	}
	c.stop()
	c.refresh()
	before := mem.reads
	word()
	word()
	if c.pages != nil || mem.reads != before+2 {
		t.Fatalf("a cache refreshed while off: pages %v, %d reads for 2 words", c.pages != nil, mem.reads-before)
	}
}
