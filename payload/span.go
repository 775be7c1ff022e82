package payload

// Span is the samples a frame's name holds for: those of GC epoch Epoch
// whose GCStamp.Interval is in [From, To]. A process without stamps has its
// names marked with the full span of epoch 0.
type Span struct{ Epoch, From, To uint64 }

// FullSpan holds for every sample of a process without GC stamps.
var FullSpan = Span{From: 0, To: ^uint64(0)}

// Covers says whether the span holds for a sample with stamp st.
func (s Span) Covers(st GCStamp) bool {
	if !st.Stamped || s == FullSpan {
		return !st.Stamped && s == FullSpan
	}
	i := st.Interval()
	return !st.Compacting && s.Epoch == st.Epoch && s.From <= i && i <= s.To
}

// NamedFrame is a frame user space has named and the samples the name
// holds for.
type NamedFrame struct {
	Frame
	Span Span
}
