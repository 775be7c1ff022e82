package symtab

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSymbolTableBudget: names a target makes up without end (long and
// distinct) fill a table's budget and no more: each is cut at
// MaxNameBytes; past the budget a frame gets its method's name without a
// line, and past the reserve OverBudgetLabel; each such name says so.
func TestSymbolTableBudget(t *testing.T) {
	tab := New()
	tab.SetBudget(1<<20, 1<<20)
	long := strings.Repeat("é", 4<<10) // cut inside a character, or not, as the prefix is odd or even
	var exact, coarse, over int
	for m := range 200 {
		for line := range 200 {
			info := FrameInfo{Label: "M" + strconv.Itoa(m) + long, Path: "/p/" + strconv.Itoa(m) + long, HasPath: true, Line: int64(line + 1)}
			id := tab.NameID(cutName(info))
			got, named, ok := tab.FrameName(id)
			switch {
			case !named || !ok:
				t.Fatalf("method %d line %d: no name (id %d)", m, line, id)
			case len(got.Label) > MaxNameBytes+len(NameCut) || len(got.Path) > MaxNameBytes+len(NameCut) || !utf8.ValidString(got.Label):
				t.Fatalf("a name of %d and %d bytes kept", len(got.Label), len(got.Path))
			case !tab.OverBudget(id):
				exact++
			case got.Label == OverBudgetLabel:
				over++
			case got.Line == 0 && strings.HasSuffix(got.Label, NameCut):
				coarse++
			default:
				t.Fatalf("over the budget, named %q line %d", got.Label[:20], got.Line)
			}
		}
		if tab.nameBytes > tab.maxNameBytes+tab.maxNameBytes/8+nameCost(FrameInfo{Label: OverBudgetLabel}) {
			t.Fatalf("%d bytes of names held, budget %d", tab.nameBytes, tab.maxNameBytes)
		}
	}
	if exact == 0 || coarse == 0 || over == 0 {
		t.Errorf("%d exact names, %d without their line, %d over the budget: want some of each", exact, coarse, over)
	}
}
