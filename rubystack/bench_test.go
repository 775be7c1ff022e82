package rubystack

import (
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// BenchmarkLayoutFromDWARF measures opening a Ruby and resolving its Layout
// from DWARF: zlib-compressed sections of a shared libruby against the
// uncompressed ones of a static ruby.
func BenchmarkLayoutFromDWARF(b *testing.B) {
	for _, flavor := range []string{"3.1.2-shared", "3.3.8-static"} {
		b.Run(flavor, func(b *testing.B) {
			path := testruby.Get(b, flavor).VM
			b.ReportAllocs()
			for b.Loop() {
				bin, err := OpenBinary(path, OpenOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bin.LayoutFromDWARF(); err != nil {
					b.Fatal(err)
				}
				bin.Close()
			}
		})
	}
}

// BenchmarkLayoutFromTable is the same for Debian's stripped libruby, whose
// Layout comes from the built-in table.
func BenchmarkLayoutFromTable(b *testing.B) {
	path := testruby.Get(b, "3.1.2-debian").VM
	b.ReportAllocs()
	for b.Loop() {
		bin, err := OpenBinary(path, OpenOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bin.Layout(); err != nil {
			b.Fatal(err)
		}
		bin.Close()
	}
}
