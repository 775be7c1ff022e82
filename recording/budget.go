package recording

import (
	"github.com/rubyperf/rubyperf/payload"
)

// What a recording holds grows with its targets' shape, not with time: the
// distinct frames they run and the length of their names. A target sets
// both (eval'd code, generated class names and paths), so the memory for
// them has a hard budget (Options.MemoryBudget), split over what grows:
//
//   - names (half): the distinct frame names, by the bytes of their
//     label and path, each cut at symtab.MaxNameBytes (symtab.NameCut
//     marks the cut);
//   - frame keys (a quarter): the frames' addresses and the spans their
//     names hold for;
//   - a thread's previous stack, to skip what the next shares (a
//     sixteenth): past it, the stacks kept start afresh.
//
// Past the names' budget a frame read for the first time is named without
// its line (the method's name, interned once in a reserve of an eighth
// more), and past that reserve, or past the frame keys' budget, it is
// named symtab.OverBudgetLabel without being read (symtab/budget.go).
// Such frames are counted
// (Summary.FramesOverBudget); nothing grows past the budget. A live
// recording (the agent) starts its table afresh instead, once nothing
// waits on the names it gave.
//
// The rest of the budget covers what is bounded by count already (caches,
// off-CPU samples held, the records being written).

// DefaultMemoryBudget is a recording's memory budget unless told.
const DefaultMemoryBudget = 256 << 20

// MinMemoryBudget is the smallest budget a recording takes.
const MinMemoryBudget = 16 << 20

// lastFrameCost: lastFrames holds a frame's bytes as the program wrote them,
// its name's id and the name's kind.
const lastFrameCost = int64(payload.FrameSize) + 8 + 1

// budget is a memory budget split over what grows (see above).
type budget struct {
	names, keys, lastFrames int64
}

// splitBudget splits a total budget in bytes.
func splitBudget(total int64) budget {
	total = max(total, MinMemoryBudget)
	return budget{names: total / 2, keys: total / 4, lastFrames: total / 16}
}
