package readback

import (
	"encoding/binary"
	"fmt"

	"github.com/rubyperf/rubyperf/payload"
)

// LiveCounts is what a recording that followed its allocated objects
// (record --alloc --live) says of them: how many were followed, and of
// them how many were alive at its end having survived a GC (Alive, the
// samples merge.Stack.Alive marks), alive but not yet through a GC
// (Young), dead, or of a fate not proven (Unknown); NotFollowed, past
// the recorder's bound.
type LiveCounts struct {
	Followed, Alive, Young, Died, Unknown, NotFollowed uint64
}

// Bounds on FeatureAllocLive.
const (
	liveHeader   = 8 + 6*8
	liveRecord   = 24
	maxLiveAlive = 1 << 22
)

// decodeAllocLive reads FeatureAllocLive: its counts and the samples whose
// objects were alive.
func decodeAllocLive(b []byte) (LiveCounts, map[payload.AllocKey]bool, error) {
	var c LiveCounts
	if len(b) < liveHeader {
		return c, nil, fmt.Errorf("alive objects: %d bytes, shorter than the header", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != 1 {
		return c, nil, fmt.Errorf("alive objects: format %d, not 1", v)
	}
	n := uint64(binary.LittleEndian.Uint32(b[4:]))
	if n > maxLiveAlive || uint64(len(b)-liveHeader) != n*liveRecord {
		return c, nil, fmt.Errorf("alive objects: %d of them in %d bytes", n, len(b))
	}
	for i, dst := range []*uint64{&c.Followed, &c.Alive, &c.Young, &c.Died, &c.Unknown, &c.NotFollowed} {
		*dst = binary.LittleEndian.Uint64(b[8+8*i:])
	}
	if c.Alive != n {
		return c, nil, fmt.Errorf("alive objects: %d listed, %d counted", n, c.Alive)
	}
	keys := make(map[payload.AllocKey]bool, n)
	for r := b[liveHeader:]; len(r) >= liveRecord; r = r[liveRecord:] {
		keys[payload.AllocKey{PID: binary.LittleEndian.Uint32(r), TID: binary.LittleEndian.Uint32(r[4:]),
			Window: binary.LittleEndian.Uint32(r[8:]), Seq: binary.LittleEndian.Uint32(r[12:]),
			Slot: binary.LittleEndian.Uint64(r[16:])}] = true
	}
	return c, keys, nil
}
