package bpf

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestPageIndex: for every address of random tables (rows as EncodeRows
// makes them: sorted, the first at pc 0, some far apart), the row a search
// between its page's first and last rows finds is the one a search of all
// the rows finds, as row_of searches in the program.
func TestPageIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + rng.IntN(300)
		rows := []UnwindRow{{Pc: 0}}
		pc := uint32(0)
		for len(rows) < n {
			step := uint32(1 + rng.IntN(64))
			if rng.IntN(20) == 0 {
				step += uint32(rng.IntN(8 << rowPageShift)) // a gap of pages
			}
			pc += step
			rows = append(rows, UnwindRow{Pc: pc})
		}
		pages := pageIndex(rows)
		if want := int(pc>>rowPageShift) + 1; len(pages) != want {
			t.Fatalf("table %d: %d pages for a last pc of %#x, want %d", trial, len(pages), pc, want)
		}
		for rel := uint32(0); rel <= pc+100; rel += 1 + uint32(rng.IntN(7)) {
			whole := sort.Search(len(rows), func(i int) bool { return rows[i].Pc > rel }) - 1
			p := rel >> rowPageShift
			lo, hi := 0, len(rows)-1
			if int(p) < len(pages) {
				lo, hi = int(pages[p].First), int(pages[p].Last)
			}
			if rows[lo].Pc > rel {
				t.Fatalf("table %d, pc %#x: page %d starts at row %d (pc %#x), above it", trial, rel, p, lo, rows[lo].Pc)
			}
			if hi+1 < len(rows) && rows[hi+1].Pc <= rel {
				t.Fatalf("table %d, pc %#x: page %d ends at row %d, below row %d (pc %#x)", trial, rel, p, hi, hi+1, rows[hi+1].Pc)
			}
			in := lo + sort.Search(hi-lo+1, func(i int) bool { return rows[lo+i].Pc > rel }) - 1
			if in != whole {
				t.Fatalf("table %d, pc %#x: row %d in its page, %d in all", trial, rel, in, whole)
			}
		}
	}
	if pageIndex(nil) != nil {
		t.Error("no rows: a page index")
	}
	if pageIndex([]UnwindRow{{Pc: 0}, {Pc: 0xffffff00}}) != nil {
		t.Error("4 GiB of code: a page index past maxObjectPages")
	}
}
