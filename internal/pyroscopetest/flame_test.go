package pyroscopetest

import "testing"

// TestFlameOf: a flamebearer of total -> a -> {b -> a, c}: totals count
// each stack once per name (a recurs under itself), selves add up, and a
// name index out of the table is an error.
func TestFlameOf(t *testing.T) {
	names := []string{"total", "a", "b", "c"}
	levels := [][]int64{
		{0, 10, 0, 0},
		{0, 10, 2, 1},
		{0, 5, 1, 2, 0, 3, 3, 3}, // b at 0..5, c at 5..8
		{0, 4, 4, 1},             // a under b
	}
	f, err := flameOf(names, levels, 10)
	if err != nil {
		t.Fatal(err)
	}
	if f.Total["a"] != 10 || f.Total["b"] != 5 || f.Total["c"] != 3 || f.Self["a"] != 6 || f.Self["c"] != 3 {
		t.Errorf("totals %v selves %v", f.Total, f.Self)
	}
	if s := f.Share("c"); s != 0.3 {
		t.Errorf("share of c %v, want 0.3", s)
	}
	if _, err := flameOf(names, [][]int64{{0, 1, 1, 9}}, 1); err == nil {
		t.Error("a name index past the table was taken")
	}
	if _, err := flameOf(names, [][]int64{{0, 1, 1}}, 1); err == nil {
		t.Error("a level of 3 numbers was taken")
	}
}
