package symtab

import (
	"unicode/utf8"
	"unsafe"
)

// The table's share of a recording's memory budget (the recorder splits
// the budget, and tells the table its share with SetBudget): the distinct
// frame names, by the bytes of their label and path, each cut at
// MaxNameBytes (NameCut marks the cut); and the frame keys, with the spans
// their names hold for.
//
// Past the names' budget a frame read for the first time is named without
// its line (the method's name, interned once in a reserve of an eighth
// more), and past that reserve, or past the frame keys' budget, it is
// named OverBudgetLabel without being read. OverBudget tells such names
// (the recorder counts them); nothing grows past the budget. A table is
// started afresh (Restart) once nothing waits on the names it gave.

// MaxNameBytes bounds a frame name's label, and its path, each: a longer
// one keeps its first MaxNameBytes bytes (whole UTF-8 characters) and
// ends in NameCut.
const MaxNameBytes = 1 << 10

// NameCut ends a label or path cut at MaxNameBytes.
const NameCut = "[...]"

// OverBudgetLabel names a frame first seen once the recording's memory
// budget for names was spent: it was not read.
const OverBudgetLabel = "[name over the memory budget]"

// Estimated bytes what the table holds costs beyond the strings: a name's
// place in Names and nameIDs; a frame key's map entry; one of its names.
const (
	nameOverhead = 3*int64(unsafe.Sizeof(FrameInfo{})) + 64
	keyOverhead  = int64(unsafe.Sizeof(FrameKey{})) + 64
	namedCost    = int64(unsafe.Sizeof(Named{}))
)

// cutName is info with its label and path cut at MaxNameBytes: a copy, so
// the longer strings read are not kept.
func cutName(info FrameInfo) FrameInfo {
	info.Label = cutString(info.Label)
	info.Path = cutString(info.Path)
	return info
}

// cutString is s cut at MaxNameBytes, at a character's start, and marked.
func cutString(s string) string {
	if len(s) <= MaxNameBytes {
		return s
	}
	n := MaxNameBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n-- // a character cut in two is left out whole
	}
	return s[:n] + NameCut // a new string: s is not kept
}

// nameCost is what interning a name costs the budget.
func nameCost(info FrameInfo) int64 {
	return int64(len(info.Label)+len(info.Path)) + nameOverhead
}

// SetBudget bounds what the table holds while recording, the bytes of
// names and of frame keys (0: no bound, as for a table read from a file).
func (t *Table) SetBudget(names, keys int64) {
	t.maxNameBytes, t.maxKeyBytes = names, keys
}

// keysFull says whether the frame keys' budget is spent.
func (t *Table) keysFull() bool {
	return t.maxKeyBytes > 0 && t.keyBytes+keyOverhead+namedCost > t.maxKeyBytes
}

// canonical is info as the table holds it: its strings are those of the
// name it has in Names, not another copy read for another key; past the
// names' budget, the name it gets there (overBudget).
func (t *Table) canonical(info FrameInfo) FrameInfo {
	if id := t.NameID(info); id >= NameFirst {
		return t.Names[id-NameFirst]
	}
	return info
}

// Full says whether the names' or the frame keys' budget is spent.
func (t *Table) Full() bool {
	return t.keysFull() || t.maxNameBytes > 0 && t.nameBytes >= t.maxNameBytes
}

// overBudget is the id of the name a frame read as info gets once the
// names' budget is spent: its method's name without a line, within the
// reserve, else OverBudgetLabel.
func (t *Table) overBudget(info FrameInfo) uint64 {
	coarse := FrameInfo{Label: info.Label, Path: info.Path, HasPath: info.HasPath, CFunc: info.CFunc,
		Unknown: info.Unknown, Drop: info.Drop}
	if id, ok := t.nameIDs[coarse]; ok {
		return id
	}
	if cost := nameCost(coarse); t.nameBytes+cost <= t.maxNameBytes+t.maxNameBytes/8 && len(t.Names) < maxNames {
		id := t.intern(coarse, cost)
		t.coarse[id] = true
		return id
	}
	return t.overBudgetID()
}

// overBudgetID is the id of OverBudgetLabel, interned at its first use
// (past every budget: it is one name).
func (t *Table) overBudgetID() uint64 {
	t.overBudgetGiven = true
	info := FrameInfo{Label: OverBudgetLabel}
	if id, ok := t.nameIDs[info]; ok {
		return id
	}
	return t.intern(info, nameCost(info))
}

// GivenOverBudget says whether any name was given past the budget yet: until
// then no frame is OverBudget, and a sample's need not be looked at.
func (t *Table) GivenOverBudget() bool { return t.overBudgetGiven || len(t.coarse) > 0 }

// OverBudget says whether name id was given past the names' budget: a
// method's name without its line, or OverBudgetLabel.
func (t *Table) OverBudget(id uint64) bool {
	if t.coarse[id] {
		return true
	}
	info, named, ok := t.FrameName(id)
	return named && ok && info.Label == OverBudgetLabel && info.Path == "" && !info.Unknown
}

// keyCost is what frame key k with its names costs the budget.
func keyCost(names []Named) int64 {
	return keyOverhead + int64(len(names))*namedCost
}

// dropKey forgets frame key k, and what it cost.
func (t *Table) dropKey(k FrameKey) {
	if names, ok := t.Frames[k]; ok {
		t.keyBytes -= keyCost(names)
		delete(t.Frames, k)
	}
}
