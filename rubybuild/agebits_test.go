package rubybuild

import (
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestAgeBits: the built-in tables up to 3.2 hold ages in two flag bits
// (RUBY_FL_PROMOTED0 and 1, from bit 5); from 3.3 the flags hold one bit,
// and the tables do not carry heap_page.
func TestAgeBits(t *testing.T) {
	for _, c := range []struct {
		version string
		ok      bool
	}{{"3.1.2", true}, {"3.2.0", true}, {"3.3.0", false}, {"3.4.0", false}} {
		l, err := BuiltinLayout(c.version, "x86_64")
		if err != nil {
			t.Fatal(err)
		}
		mask, shift, ok := l.AgeBits()
		if ok != c.ok || ok && (mask != 3<<5 || shift != 5) {
			t.Errorf("%s: AgeBits() = %#x, %d, %v; want ok %v (mask 0x60, shift 5)", c.version, mask, shift, ok, c.ok)
		}
	}
}

// TestAgesFromDWARF: every test Ruby with DWARF tells a young object's age,
// in its flags up to 3.2 and in its heap page from 3.3 (64 KiB pages of
// 40-byte slots, as gc.c's enum of page sizes says on x86_64).
func TestAgesFromDWARF(t *testing.T) {
	for _, r := range testruby.WithDWARF(t) {
		b, err := OpenBinary(r.VM, OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := b.LayoutFromDWARF()
		b.Close()
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		_, _, flags := l.AgeBits()
		pages := l.AgesInPages()
		inPages := !l.Version.Less(Version{3, 3, 0})
		if flags == inPages || pages != inPages {
			t.Errorf("%s (%s): ages in flags %v, in pages %v; want pages %v", r.Name, l.Version, flags, pages, inPages)
		}
		if h := l.HeapPage; pages && (h.Align != 1<<16 || h.SlotSize != 40 || h.Page != 0 || h.AgeBitsSize != 26*8*2) {
			t.Errorf("%s: heap page %+v; want 64 KiB pages of 40-byte slots, 416 bytes of age bits", r.Name, h)
		}
	}
}
