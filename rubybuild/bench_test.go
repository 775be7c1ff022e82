package rubybuild

import (
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// BenchmarkLayoutFromDWARF measures opening a Ruby and resolving its Layout
// from DWARF: zlib-compressed sections of a shared libruby against the
// uncompressed ones of a static ruby.
func BenchmarkLayoutFromDWARF(b *testing.B) {
	for _, flavor := range []string{"source-3.1-shared", "source-3.3-static"} {
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
	path := testruby.Get(b, "debian-3.1").VM
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

// BenchmarkPaholePeer is the peer of BenchmarkLayoutFromDWARF: pahole, the
// DWARF reader the tests use as an oracle, printing the same structs from
// the same binary (a process start included, as a user would run it).
func BenchmarkPaholePeer(b *testing.B) {
	pahole := testskip.Command(b, "pahole", "dwarves")
	var names []string
	for n := range wantedStructs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, flavor := range []string{"source-3.1-shared", "source-3.3-static"} {
		b.Run(flavor, func(b *testing.B) {
			path := testruby.Get(b, flavor).VM
			for b.Loop() {
				if err := exec.Command(pahole, "-C", strings.Join(names, ","), path).Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
