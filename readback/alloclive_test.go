package readback

import (
	"encoding/binary"
	"testing"

	"github.com/rubyperf/rubyperf/payload"
)

// liveSection encodes FeatureAllocLive as the recorder writes it.
func liveSection(c LiveCounts, keys ...payload.AllocKey) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for _, n := range []uint64{c.Followed, c.Alive, c.Young, c.Died, c.Unknown, c.NotFollowed} {
		b = binary.LittleEndian.AppendUint64(b, n)
	}
	for _, k := range keys {
		for _, v := range []uint32{k.PID, k.TID, k.Window, k.Seq} {
			b = binary.LittleEndian.AppendUint32(b, v)
		}
		b = binary.LittleEndian.AppendUint64(b, k.Slot)
	}
	return b
}

func TestDecodeAllocLive(t *testing.T) {
	k := payload.AllocKey{PID: 7, TID: 8, Window: 3, Seq: 41, Slot: 0x7f0000001000}
	c, keys, err := decodeAllocLive(liveSection(LiveCounts{Followed: 10, Alive: 1, Died: 9}, k))
	if err != nil || c.Followed != 10 || c.Alive != 1 || c.Died != 9 || len(keys) != 1 || !keys[k] {
		t.Fatalf("%+v %v %v", c, keys, err)
	}
	for name, b := range map[string][]byte{
		"short":         liveSection(LiveCounts{})[:20],
		"format 2":      append(binary.LittleEndian.AppendUint32(nil, 2), liveSection(LiveCounts{})[4:]...),
		"count too big": liveSection(LiveCounts{Alive: 2}, k)[:liveHeader+liveRecord-1],
		"counts differ": liveSection(LiveCounts{Alive: 5}, k),
	} {
		if _, _, err := decodeAllocLive(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// FuzzDecodeAllocLive: whatever the section's bytes, decoding returns
// without panicking, and what it returns adds up.
func FuzzDecodeAllocLive(f *testing.F) {
	f.Add(liveSection(LiveCounts{Followed: 2, Alive: 1}, payload.AllocKey{PID: 1, Slot: 8}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, keys, err := decodeAllocLive(b)
		if err == nil && uint64(len(keys)) > c.Alive {
			t.Fatalf("%d keys, %d alive", len(keys), c.Alive)
		}
	})
}
