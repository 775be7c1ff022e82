package rubystack

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/rubyoracle"
	"github.com/rubyperf/rubyperf/internal/testruby"
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

// BenchmarkSnapshotDeep snapshots a parked 300-deep recursion with warm
// caches: the steady-state cost of one snapshot, and its reads of target
// memory.
func BenchmarkSnapshotDeep(b *testing.B) {
	for _, flavor := range []string{"debian-3.1", "source-3.3-static"} {
		b.Run(flavor, func(b *testing.B) {
			r := testruby.Get(b, flavor)
			script, _ := filepath.Abs("../testdata/ruby/deep.rb")
			cmd := testruby.Start(b, r, append(rubyoracle.Args(b, r.Exe), script)...)
			rd := liveReader(b, cmd.Process.Pid)
			stacks, err := rd.Snapshot() // warm the caches
			if err != nil {
				b.Fatal(err)
			}
			frames := len(stacks[0].Frames)
			if frames < 300 {
				b.Fatalf("only %d frames", frames)
			}
			b.ReportAllocs()
			before := rd.Stats.Reads
			b.ResetTimer()
			for b.Loop() {
				if _, err := rd.Snapshot(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rd.Stats.Reads-before)/float64(b.N), "reads/op")
			b.ReportMetric(float64(frames), "frames")
		})
	}
}

// BenchmarkPaholePeer is the peer of BenchmarkLayoutFromDWARF: pahole, the
// DWARF reader the tests use as an oracle, printing the same structs from
// the same binary (a process start included, as a user would run it).
func BenchmarkPaholePeer(b *testing.B) {
	pahole, err := exec.LookPath("pahole")
	if err != nil {
		b.Skip("pahole not installed")
	}
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
