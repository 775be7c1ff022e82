package native

import (
	"testing"
)

// FuzzCompileTable interprets arbitrary call frame instructions: compiling
// never panics, and its rows are sorted, within the FDEs, and bounded.
func FuzzCompileTable(f *testing.F) {
	// libc's CIE (def_cfa rsp+8, ra at cfa-8) and a typical prologue.
	f.Add([]byte{0x0c, 0x07, 0x08, 0x90, 0x01}, []byte{0x41, 0x0e, 0x10, 0x86, 0x02, 0x43, 0x0d, 0x06, 0x4a, 0x0c, 0x07, 0x08}, uint16(64), int8(-8))
	f.Add([]byte{0x0c, 0x07, 0x08, 0x90, 0x01}, []byte{0x0e, 0x10, 0x46, 0x0e, 0x18, 0x4a, 0x0f, 0x0b, 0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}, uint16(32), int8(-8))
	f.Add([]byte{0x0c, 0x07, 0x08, 0x90, 0x01}, []byte{0x4a, 0x0a, 0x0e, 0x20, 0x4b, 0x0b, 0x42, 0x07, 0x10}, uint16(100), int8(-8))
	f.Fuzz(func(t *testing.T, initial, instructions []byte, size uint16, dataAlign int8) {
		fdes := []fdeRange{
			{begin: 0x1000, end: 0x1000 + uint64(size), initial: initial, instructions: instructions, codeAlign: 1, dataAlign: int64(dataAlign), raColumn: dwarfRA},
			{begin: 0x1000 + uint64(size)/2, end: 0x2000 + uint64(size), initial: instructions, instructions: initial, codeAlign: 4, dataAlign: int64(dataAlign), raColumn: dwarfRA},
		}
		tab, err := compileTable(ArchX86_64, fdes)
		if err != nil {
			return
		}
		for i, r := range tab.Rows {
			if r.Start < 0x1000 || r.Start > 0x2000+uint64(size) {
				t.Fatalf("row %d at %#x outside the FDEs", i, r.Start)
			}
			if i > 0 && r.Start <= tab.Rows[i-1].Start {
				t.Fatalf("rows %d and %d not sorted: %v, %v", i-1, i, tab.Rows[i-1], r)
			}
		}
		if len(tab.Rows) > 2+len(initial)+2*len(instructions)+4 {
			t.Fatalf("%d rows from %d bytes of instructions", len(tab.Rows), len(initial)+len(instructions))
		}
		if len(tab.Rows) > 0 && tab.Rows[len(tab.Rows)-1].CFA != CFANone {
			t.Fatalf("the last row %v has a rule: the table's end is open", tab.Rows[len(tab.Rows)-1])
		}
		tab.Lookup(0x1000 + uint64(size)/3)
	})
}
