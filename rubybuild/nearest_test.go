package rubybuild

import (
	"strings"
	"testing"
)

// TestNearestTable: a version with its own table gets it; a later patch of a
// known minor line gets the newest earlier table; an earlier one the oldest
// later table; an unknown minor line or arch gets none.
func TestNearestTable(t *testing.T) {
	byLine := map[[2]int][]Version{}
	for _, k := range tableKeys() {
		vs, arch, _ := strings.Cut(k, "/")
		v, err := ParseVersion(vs)
		if err != nil || arch != "x86_64" {
			continue
		}
		byLine[[2]int{v.Major, v.Minor}] = append(byLine[[2]int{v.Major, v.Minor}], v)
	}
	if len(byLine) == 0 {
		t.Fatal("no x86_64 tables")
	}
	for line, vs := range byLine {
		lo, hi := vs[0], vs[0]
		for _, v := range vs {
			if got, ok := nearestTable(v, "x86_64"); !ok || got != v {
				t.Errorf("%s: got %s %v, want its own table", v, got, ok)
			}
			if v.Less(lo) {
				lo = v
			}
			if hi.Less(v) {
				hi = v
			}
		}
		later := Version{line[0], line[1], hi.Patch + 7}
		if got, ok := nearestTable(later, "x86_64"); !ok || got != hi {
			t.Errorf("%s: got %s %v, want the newest earlier table %s", later, got, ok, hi)
		}
		if lo.Patch > 0 {
			earlier := Version{line[0], line[1], 0}
			if got, ok := nearestTable(earlier, "x86_64"); !ok || got.Major != line[0] || got.Minor != line[1] {
				t.Errorf("%s: got %s %v, want a table of its line", earlier, got, ok)
			}
		}
	}
	if v, ok := nearestTable(Version{9, 9, 9}, "x86_64"); ok {
		t.Errorf("9.9.9: got table %s, want none", v)
	}
	if v, ok := nearestTable(Version{3, 3, 8}, "riscv64"); ok {
		t.Errorf("riscv64: got table %s, want none", v)
	}
}
