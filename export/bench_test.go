package export

import (
	"io"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// BenchmarkWriters measures each writer on 10,000 generated samples
// (bigStacks), writing to io.Discard.
func BenchmarkWriters(b *testing.B) {
	stacks := bigStacks(10000)
	for _, bc := range []struct {
		name  string
		write func(io.Writer, []merge.Stack) error
	}{
		{"folded", func(w io.Writer, s []merge.Stack) error { return WriteFolded(w, s, FoldedOptions{}) }},
		{"pprof", func(w io.Writer, s []merge.Stack) error { return WritePprof(w, s, PprofOptions{Period: testPeriod}) }},
		{"speedscope", func(w io.Writer, s []merge.Stack) error { return WriteSpeedscope(w, s, SpeedscopeOptions{}) }},
		{"svg", func(w io.Writer, s []merge.Stack) error { return WriteFlameGraphSVG(w, s, SVGOptions{}) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.write(io.Discard, stacks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
