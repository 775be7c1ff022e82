package main

import (
	"fmt"
	"math"
	"sort"
)

// quantile of xs (0 ≤ q ≤ 1), interpolated; NaN for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }

// spread is the middle half of xs, "p25–p75".
func spread(xs []float64, format string) string {
	return fmt.Sprintf(format+"–"+format, quantile(xs, 0.25), quantile(xs, 0.75))
}

// pct shows a ratio as a change: 1.074 → "+7.4%".
func pct(r float64) string { return fmt.Sprintf("%+.1f%%", 100*(r-1)) }
