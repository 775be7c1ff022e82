package rubystack

import (
	"path/filepath"
	"testing"

	"github.com/rubyperf/rubyperf/internal/rubyoracle"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

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
