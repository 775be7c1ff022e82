package rubybuild

import (
	"debug/elf"
	"encoding/binary"
	"sort"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rubyperf/rubyperf/debuginfo"
)

// functionEnd bounds the size of the function starting at addr with the
// .eh_frame_hdr search table: the next FDE's start (without the table, the
// FDE's own end: fdeEnd). For a stripped binary that
// is the best size there is short of parsing the FDE itself; the range may
// include alignment padding, never another function.
func (e *elfFile) functionEnd(addr uint64) (uint64, bool) {
	s := e.f.Section(".eh_frame_hdr")
	if s == nil {
		return e.fdeEnd(addr)
	}
	if s.Size < 12 || s.Size > maxSectionBytes {
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

// fdeEnd is the end of the FDE that begins at addr, read from .eh_frame
// itself, for a file linked without .eh_frame_hdr (Debian's musl-gcc passes
// the linker no --eh-frame-hdr). The FDEs are parsed once per file.
func (e *elfFile) fdeEnd(addr uint64) (uint64, bool) {
	e.fdeOnce.Do(func() { e.fdeEnds = e.readFDEEnds() })
	end, ok := e.fdeEnds[addr]
	return end, ok
}

// readFDEEnds maps the start of each FDE of .eh_frame to its end; nil when
// there is no .eh_frame or it does not parse.
func (e *elfFile) readFDEEnds() map[uint64]uint64 {
	s := e.f.Section(".eh_frame")
	if s == nil || s.Type == elf.SHT_NOBITS || s.Size > maxSectionBytes {
		return nil
	}
	data, err := e.sectionData(s)
	if err != nil {
		return nil
	}
	var fdes frame.FrameDescriptionEntries
	if err := debuginfo.Guard(func() error {
		var err error
		fdes, err = frame.Parse(data, e.f.ByteOrder, 0, 8, s.Addr)
		return err
	}); err != nil {
		return nil
	}
	ends := make(map[uint64]uint64, len(fdes))
	for _, f := range fdes {
		if f.End() > f.Begin() {
			ends[f.Begin()] = f.End()
		}
	}
	return ends
}
