package perfmap

import "slices"

// maxReuseCandidates bounds the bases existingBase weighs: a map that
// repeats one name at more places than this is not one we wrote.
const maxReuseCandidates = 1024

// maxReuseChecks bounds the candidates existingBase verifies (one scan of
// the file each), lowest base first.
const maxReuseChecks = 4

// existingBase returns a base at which the map already holds every one of
// entries (offsets from the base, covering span bytes) with its size and
// name, and nothing else in [base, base+span): what an earlier
// WriteSynthetic of the same entries, or of more, left there (the same
// recording injected again). ok is false when there is none. It looks only
// in the window synthetic bases come from, so it never takes a JIT's
// entries for ours.
func (m *Map) existingBase(entries []Entry, span uint64) (base uint64, ok bool, err error) {
	byName := make(map[string][]int, len(entries))
	for i, e := range entries {
		byName[e.Name] = append(byName[e.Name], i)
	}
	// A base gets a hit for each old entry that is one of ours moved by it.
	hits := map[uint64]int{}
	err = m.scan(func(old Entry) error {
		for _, i := range byName[old.Name] {
			e := entries[i]
			if e.Size != old.Size || old.Start < e.Start {
				continue
			}
			b := old.Start - e.Start
			if b%Align != 0 || b < Floor || b > Ceiling-span {
				continue
			}
			if _, seen := hits[b]; seen || len(hits) < maxReuseCandidates {
				hits[b]++
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	var candidates []uint64
	for b, n := range hits {
		if n >= len(entries) {
			candidates = append(candidates, b)
		}
	}
	slices.Sort(candidates)
	for _, b := range candidates[:min(len(candidates), maxReuseChecks)] {
		if ok, err := m.holdsExactly(entries, b, span); err != nil || ok {
			return b, ok, err
		}
	}
	return 0, false, nil
}

// holdsExactly reports whether the entries in [base, base+span) are
// entries moved by base, each once, and nothing else.
func (m *Map) holdsExactly(entries []Entry, base, span uint64) (bool, error) {
	want := make(map[Entry]int, len(entries))
	for _, e := range entries {
		e.Start += base
		want[e]++
	}
	exact := true
	err := m.scan(func(old Entry) error {
		if !exact || old.End() <= base || old.Start >= base+span {
			return nil
		}
		if want[old] == 0 {
			exact = false // a stranger, or one of ours twice
			return nil
		}
		want[old]--
		return nil
	})
	if err != nil || !exact {
		return false, err
	}
	for _, n := range want {
		if n != 0 {
			return false, nil
		}
	}
	return true, nil
}
