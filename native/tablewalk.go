package native

// TableStop says why WalkTable stopped.
type TableStop uint8

const (
	// StopOutermost: the thread's outermost frame was reached (the return
	// address is undefined, or zero): the stack is whole.
	StopOutermost TableStop = iota
	// StopNoTable: the PC is in no mapped object with a table (JIT code,
	// an object without call frame information, an unmapped address).
	StopNoTable
	// StopNoRule: the object's table has no row for the PC.
	StopNoRule
	// StopUnsupported: the row's rule is one the table does not model.
	StopUnsupported
	// StopFPUnknown: the CFA is computed from a frame pointer no rule has
	// kept.
	StopFPUnknown
	// StopRead: the stack could not be read where the rule says.
	StopRead
	// StopNotUp: the next frame would not lie above this one.
	StopNotUp
	// StopDepth: MaxFrames frames were found.
	StopDepth
)

var tableStopNames = [...]string{"outermost", "no table", "no rule", "unsupported rule", "frame pointer unknown",
	"unreadable stack", "stack not unwinding upwards", "too deep"}

func (s TableStop) String() string {
	if int(s) < len(tableStopNames) {
		return tableStopNames[s]
	}
	return "unknown"
}

// TableFinder finds the table holding pc, and pc as a virtual address of
// that table's object.
type TableFinder func(pc uint64) (t *Table, vaddr uint64, ok bool)

// WalkTable unwinds a user stack the way the BPF sampler does: with the
// compiled tables alone and reads of stack memory, from the leaf's PC, SP
// and FP (and, on arm64, LR). It appends the PCs it finds (the leaf's, then
// return addresses) to dst and says why it stopped. Unwind, which
// interprets the call frame information itself, is its reference.
func WalkTable(dst []uint64, pc, sp, fp, lr uint64, read func(addr uint64) (uint64, bool), find TableFinder) ([]uint64, TableStop) {
	fpKnown := true
	exact := true // pc is where the thread was, not a return address
	out := dst
	for n := 0; ; n++ {
		if n >= MaxFrames {
			return out, StopDepth
		}
		if pc == 0 {
			return out, StopOutermost
		}
		out = append(out, pc)
		t, vaddr, ok := find(pc)
		if !ok {
			return out, StopNoTable
		}
		lookup := vaddr
		if !exact {
			lookup-- // a return address points after its call
		}
		exact = false
		row, ok := t.Lookup(lookup)
		if !ok {
			return out, StopNoRule
		}
		var cfa uint64
		switch row.CFA {
		case CFAOutermost:
			return out, StopOutermost
		case CFASignal:
			next, ok1 := read(sp + SignalFrameSP)
			npc, ok2 := read(sp + SignalFramePC)
			nfp, ok3 := read(sp + SignalFrameFP)
			if !ok1 || !ok2 {
				return out, StopRead
			}
			sp, pc, fp, fpKnown, exact = next, npc, nfp, ok3, true
			continue
		case CFAStackPointer:
			cfa = sp + uint64(int64(row.CFAOffset))
		case CFAFramePointer:
			if !fpKnown {
				return out, StopFPUnknown
			}
			cfa = fp + uint64(int64(row.CFAOffset))
		case CFAPLT:
			cfa = sp + uint64(int64(row.CFAOffset))
			if pc&15 >= uint64(row.PLTThreshold) {
				cfa += 8
			}
		default:
			return out, StopUnsupported
		}
		if n > 0 && cfa <= sp {
			return out, StopNotUp
		}
		var ra uint64
		switch row.RA.Kind {
		case RegAtCFA:
			if ra, ok = read(cfa + uint64(int64(row.RA.Offset))); !ok {
				return out, StopRead
			}
		case RegSame:
			if n > 0 || !t.Arch.RAInRegister {
				return out, StopUnsupported
			}
			ra = lr
		default:
			return out, StopUnsupported
		}
		switch row.FP.Kind {
		case RegAtCFA:
			fp, fpKnown = read(cfa + uint64(int64(row.FP.Offset)))
		case RegUnknown:
			fpKnown = false
		}
		sp, pc = cfa, ra
	}
}

// TableFinderOf finds tables through a process's mappings and its objects,
// as Unwind finds call frame information; JIT code has none.
func TableFinderOf(arch Arch, maps *Maps, objs *Objects) TableFinder {
	return func(pc uint64) (*Table, uint64, bool) {
		m, ok := maps.Find(pc)
		if !ok || IsJITMapping(m) || !(m.Path != "" && m.Path[0] == '/' || m.Path == VDSOPath) {
			return nil, 0, false
		}
		o := objs.Get(m.Path)
		t, err := o.Table(arch)
		if err != nil {
			return nil, 0, false
		}
		return t, o.VAddr(pc - m.Start + m.Offset), true
	}
}
