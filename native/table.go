package native

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rubyperf/rubyperf/debuginfo"
)

// An unwind table is an object's call frame information compiled into the
// few rules that walking a stack needs, one row per address range where they
// change: how to find the canonical frame address (CFA), and where the
// caller's frame pointer and return address are. It is what a program that
// cannot interpret DWARF (the BPF sampler) unwinds with, and Unwind's
// frames are the reference it is checked against (WalkTable).

// CFABase says what a row computes the canonical frame address from.
type CFABase uint8

const (
	// CFANone: no call frame information covers the address.
	CFANone CFABase = iota
	// CFAStackPointer: CFA = SP + Offset.
	CFAStackPointer
	// CFAFramePointer: CFA = FP + Offset.
	CFAFramePointer
	// CFAPLT: an x86_64 PLT entry's expression, CFA = SP + Offset, plus 8
	// once (PC & 15) >= PLTThreshold (the entry's push has run).
	CFAPLT
	// CFAOutermost: the return address is undefined, the thread's
	// outermost frame (_start, clone's child).
	CFAOutermost
	// CFAUnsupported: a rule the table does not model (another register,
	// an expression other than the PLT's): unwinding stops there.
	CFAUnsupported
	// CFASignal: a signal frame (its CIE's augmentation has 'S': glibc's
	// __restore_rt), whose caller's registers the kernel saved in the
	// ucontext at SP (x86_64 Linux: struct rt_sigframe less its return
	// address). The caller's PC is where the signal interrupted it, not a
	// return address.
	CFASignal
)

// The interrupted registers in a signal frame, from its SP: struct
// ucontext's uc_mcontext at 40, and in it gregs[REG_RBP], [REG_RSP] and
// [REG_RIP] (x86_64 Linux).
const (
	SignalFrameFP = 40 + 8*10
	SignalFrameSP = 40 + 8*15
	SignalFramePC = 40 + 8*16
)

func (b CFABase) String() string {
	switch b {
	case CFANone:
		return "none"
	case CFAStackPointer:
		return "sp"
	case CFAFramePointer:
		return "fp"
	case CFAPLT:
		return "plt"
	case CFAOutermost:
		return "outermost"
	case CFASignal:
		return "signal"
	}
	return "unsupported"
}

// RegKind says where a register's value in the caller is.
type RegKind uint8

const (
	// RegSame: the register is unchanged: the callee has not saved and
	// reused it (for the return address on arm64: it is still in LR).
	RegSame RegKind = iota
	// RegAtCFA: saved in memory at CFA + Offset.
	RegAtCFA
	// RegUnknown: not recoverable from the table (undefined, or a rule it
	// does not model).
	RegUnknown
)

// RegRule is where a register of the caller is.
type RegRule struct {
	Kind   RegKind
	Offset int32 // for RegAtCFA
}

// Row is the unwind rule from Start up to the next row's Start. Addresses
// are the object's virtual addresses.
type Row struct {
	Start uint64
	// CFA and PLTThreshold side by side: a row takes 32 bytes, not 40
	// (a libruby's table has 69,000 of them).
	CFA          CFABase
	PLTThreshold uint8 // for CFAPLT
	CFAOffset    int32
	FP           RegRule
	RA           RegRule
}

// sameRule: a and b unwind alike.
func (a Row) sameRule(b Row) bool {
	a.Start = b.Start
	return a == b
}

// Arch names the DWARF registers a table follows.
type Arch struct {
	SP, FP, RA uint64 // DWARF register numbers; RA is the return address column
	// RAInRegister: with no rule for the return address column, the
	// caller's PC is in that register (arm64's LR), not on the stack.
	RAInRegister bool
}

// ArchX86_64 is x86_64's System V psABI numbering (rsp, rbp, the return
// address column).
var ArchX86_64 = Arch{SP: dwarfRSP, FP: dwarfRBP, RA: dwarfRA}

// ArchARM64 is AArch64's DWARF numbering (sp, x29, x30).
var ArchARM64 = Arch{SP: 31, FP: 29, RA: 30, RAInRegister: true}

// Table is an object's compiled unwind rows, sorted by Start. Addresses
// below the first row, and from a CFANone row on, have no rule.
type Table struct {
	Arch Arch
	Rows []Row
	// Unsupported counts the bytes of code whose rule the table does not
	// model (CFAUnsupported rows), Bytes the bytes any row covers.
	Unsupported, Bytes uint64
}

// Bounds on compiling one object.
const (
	maxTableRows   = 4 << 20 // rows in one table (64 MiB of Row)
	maxRememberDep = 16      // DW_CFA_remember_state nesting
	maxFDEOps      = 1 << 16 // instructions interpreted for one FDE
)

var errTooManyRows = errors.New("too many unwind rows")

// Lookup returns the row covering vaddr.
func (t *Table) Lookup(vaddr uint64) (Row, bool) {
	i := sort.Search(len(t.Rows), func(i int) bool { return t.Rows[i].Start > vaddr }) - 1
	if i < 0 || t.Rows[i].CFA == CFANone {
		return Row{}, false
	}
	return t.Rows[i], true
}

// fdeRange is one FDE's code range and its instructions, with its CIE's.
type fdeRange struct {
	begin, end   uint64
	initial      []byte // the CIE's initial instructions
	instructions []byte
	codeAlign    uint64
	dataAlign    int64
	raColumn     uint64
	signal       bool // the CIE's augmentation has 'S'
}

// compileTable turns FDEs (sorted by begin) into a table. An FDE that
// overlaps the one before it is cut to start where that one ends.
func compileTable(arch Arch, fdes []fdeRange) (*Table, error) {
	// A row for about every three bytes of instructions (0.31 in Debian's
	// libruby and libc), and an FDE's gap and end rows, before runs that
	// unwind alike are merged: sized once, the slice is not copied as it
	// grows (compiling a libruby allocated 9 MB for the 2.2 MB of its
	// 69,000 rows, 3.5 now).
	n := 1
	for _, f := range fdes {
		n += len(f.instructions)/3 + 2
	}
	t := &Table{Arch: arch, Rows: make([]Row, 0, n)}
	var end uint64 // where the last FDE's code ends
	for _, f := range fdes {
		if f.end <= f.begin || f.end <= end {
			continue
		}
		if len(t.Rows) > 0 && f.begin > end {
			t.add(Row{Start: end, CFA: CFANone})
		}
		start := len(t.Rows)
		rows, err := fdeRows(arch, f, t.Rows)
		t.Rows = rows
		if err != nil {
			return nil, err
		}
		// An overlapping FDE starts where the previous one ended.
		for i := start; i < len(t.Rows) && t.Rows[i].Start < end; i++ {
			t.Rows[i].Start = end
		}
		t.Rows = dedupeStarts(t.Rows, start)
		end = f.end
		if len(t.Rows) > maxTableRows {
			return nil, errTooManyRows
		}
	}
	if len(t.Rows) > 0 {
		t.add(Row{Start: end, CFA: CFANone})
	}
	t.Rows = mergeRows(t.Rows)
	for i, r := range t.Rows {
		if r.CFA == CFANone || i+1 >= len(t.Rows) {
			continue
		}
		n := t.Rows[i+1].Start - r.Start
		t.Bytes += n
		if r.CFA == CFAUnsupported {
			t.Unsupported += n
		}
	}
	return t, nil
}

func (t *Table) add(r Row) { t.Rows = append(t.Rows, r) }

// dedupeStarts keeps, among rows from index from on that share a Start,
// the last (the rule in force once the address is reached).
func dedupeStarts(rows []Row, from int) []Row {
	out := rows[:from]
	for i := from; i < len(rows); i++ {
		if len(out) > from && out[len(out)-1].Start == rows[i].Start {
			out[len(out)-1] = rows[i]
			continue
		}
		out = append(out, rows[i])
	}
	return out
}

// mergeRows drops each row whose rule is its predecessor's.
func mergeRows(rows []Row) []Row {
	out := rows[:0]
	for _, r := range rows {
		if len(out) > 0 && out[len(out)-1].sameRule(r) {
			continue
		}
		if len(out) > 0 && out[len(out)-1].Start == r.Start {
			out[len(out)-1] = r
			continue
		}
		out = append(out, r)
	}
	return out
}

func (r Row) String() string {
	s := fmt.Sprintf("%#x cfa=%s", r.Start, r.CFA)
	if r.CFA == CFAStackPointer || r.CFA == CFAFramePointer || r.CFA == CFAPLT {
		s += fmt.Sprintf("%+d", r.CFAOffset)
	}
	return s + " fp=" + r.FP.String() + " ra=" + r.RA.String()
}

func (r RegRule) String() string {
	switch r.Kind {
	case RegSame:
		return "same"
	case RegAtCFA:
		return fmt.Sprintf("cfa%+d", r.Offset)
	}
	return "unknown"
}

// Table compiles the object's call frame information for arch, once; nil
// with the reason when the object has none or it cannot be compiled.
func (o *Object) Table(arch Arch) (*Table, error) {
	if o.err != nil {
		return nil, o.err
	}
	o.tableMu.Lock()
	defer o.tableMu.Unlock()
	if !o.tableDid {
		o.tableDid = true
		o.compile(arch)
	}
	if o.table != nil && o.table.Arch != arch {
		return nil, fmt.Errorf("%s: unwind table compiled for another architecture", o.Path)
	}
	return o.table, o.tableErr
}

// compile makes the table (o.tableMu held).
func (o *Object) compile(arch Arch) {
	fdes := make([]fdeRange, 0, len(o.fdes))
	for _, f := range o.fdes {
		if f.CIE == nil {
			continue
		}
		fdes = append(fdes, fdeRange{begin: f.Begin(), end: f.End(), initial: f.CIE.InitialInstructions,
			instructions: f.Instructions, codeAlign: f.CIE.CodeAlignmentFactor, dataAlign: f.CIE.DataAlignmentFactor,
			raColumn: f.CIE.ReturnAddressRegister, signal: strings.Contains(f.CIE.Augmentation, "S")})
	}
	o.tableErr = debuginfo.Guard(func() error {
		var err error
		o.table, err = compileTable(arch, fdes)
		return err
	})
	if o.tableErr != nil {
		o.tableErr = fmt.Errorf("%s: unwind table: %w", o.Path, o.tableErr)
	}
	if o.opts.TableOnly {
		o.fdes = nil // (and the section they point into): the table is all there is to it
	}
}

// errTableReleased: ReleaseTable let the table go.
var errTableReleased = errors.New("unwind table released")

// ReleaseTable lets go of the compiled table of an object loaded
// LoadOptions.TableOnly, once its rows are where they are used (the BPF
// program's, loaded once per object): Table fails from then on. Other
// objects keep theirs.
func (o *Object) ReleaseTable() {
	if !o.opts.TableOnly {
		return
	}
	o.tableMu.Lock()
	defer o.tableMu.Unlock()
	o.tableDid, o.table = true, nil
	if o.tableErr == nil {
		o.tableErr = fmt.Errorf("%s: %w", o.Path, errTableReleased)
	}
}
