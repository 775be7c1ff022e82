package native

import "sort"

// Mapping is a file mapped into a process.
type Mapping struct {
	Start, Limit uint64 // [Start, Limit)
	Offset       uint64 // file offset of Start
	Path         string
	Exec         bool
}

// Maps are one process's mappings over time: later mappings replace the
// ranges they overlap, as mmap does.
type Maps struct {
	list []Mapping // sorted by Start, non-overlapping
}

// maxMappings bounds one process's mapping list.
const maxMappings = 1 << 16

// Add records a mapping.
func (m *Maps) Add(n Mapping) {
	if n.Limit <= n.Start || len(m.list) >= maxMappings {
		return
	}
	var out []Mapping
	for _, o := range m.list {
		if o.Limit <= n.Start || o.Start >= n.Limit {
			out = append(out, o)
			continue
		}
		if o.Start < n.Start { // keep the part below
			lo := o
			lo.Limit = n.Start
			out = append(out, lo)
		}
		if o.Limit > n.Limit { // and the part above
			hi := o
			hi.Offset += n.Limit - o.Start
			hi.Start = n.Limit
			out = append(out, hi)
		}
	}
	out = append(out, n)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	m.list = out
}

// Find returns the mapping holding addr.
func (m *Maps) Find(addr uint64) (Mapping, bool) {
	i := sort.Search(len(m.list), func(i int) bool { return m.list[i].Start > addr }) - 1
	if i >= 0 && addr < m.list[i].Limit {
		return m.list[i], true
	}
	return Mapping{}, false
}

// Clone copies the mappings (a forked process starts with its parent's).
func (m *Maps) Clone() *Maps { return &Maps{list: append([]Mapping(nil), m.list...)} }
