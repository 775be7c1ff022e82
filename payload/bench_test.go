package payload

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeInto: the recorder's cost of decoding a 200-frame sample
// (as BenchmarkCompact's samples are built).
func BenchmarkDecodeInto(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	frames, natives := randomStack(r, 200)
	raw := stackSeed(1, frames, natives, 0)
	var p Payload
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeInto(&p, raw); err != nil {
			b.Fatal(err)
		}
	}
}
