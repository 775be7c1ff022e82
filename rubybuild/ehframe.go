package rubybuild

import (
	"encoding/binary"
	"sort"
)

// functionEnd bounds the size of the function starting at addr with the
// .eh_frame_hdr search table: the next FDE's start. For a stripped binary that
// is the best size there is short of parsing the FDE itself; the range may
// include alignment padding, never another function.
func (e *elfFile) functionEnd(addr uint64) (uint64, bool) {
	s := e.f.Section(".eh_frame_hdr")
	if s == nil || s.Size < 12 || s.Size > maxSectionBytes {
		return 0, false
	}
	b, err := e.sectionData(s)
	if err != nil || len(b) < 12 { // the data may be shorter than the header's size (SHT_NOBITS)
		return 0, false
	}
	// version 1; eh_frame_ptr as pcrel|sdata4 (0x1b); fde_count udata4 (0x03);
	// table entries datarel|sdata4 (0x3b) pairs {initial_location, fde}. This
	// is what GNU ld and lld emit; anything else is not decoded.
	if b[0] != 1 || b[1] != 0x1b || b[2] != 0x03 || b[3] != 0x3b {
		return 0, false
	}
	count := uint64(binary.LittleEndian.Uint32(b[8:]))
	if count > (uint64(len(b))-12)/8 {
		return 0, false
	}
	table := b[12:]
	start := func(i int) uint64 {
		return uint64(int64(s.Addr) + int64(int32(binary.LittleEndian.Uint32(table[8*i:]))))
	}
	i := sort.Search(int(count), func(i int) bool { return start(i) > addr })
	if i == 0 || i == int(count) || start(i-1) != addr {
		return 0, false
	}
	return start(i), true
}
