package bpf

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/native"
)

// Native unwinding in the program: each object's compiled unwind table
// (native.Table) goes once into the program's rows (loadRows), and each
// process lists the executable mappings that have rows (SetExecMaps); its
// samples then carry native frames (payload.Payload.Natives).

// UnwindRow is one row as the program reads it (struct unwind_row).
type UnwindRow = rubyUnwindRow

// ExecMap is one executable mapping of a process with rows (struct
// exec_map): [Start, End) in the process, Base the process address of its
// object's row pc 0, its rows at Rows..Rows+Nrows in the program's rows,
// its page index at Pages..Pages+Npages in the program's pages.
type ExecMap = rubyExecMap

// RowPage is one entry of an object's page index (struct row_page): the
// rows that may be in force in 1<<rowPageShift bytes of its code.
type RowPage = rubyRowPage

// Row kinds (ROW_* in ruby.bpf.c).
const (
	rowCFANone        = 0
	rowCFASP          = 1
	rowCFAFP          = 2
	rowCFAPLT         = 3
	rowCFAOutermost   = 4
	rowCFAUnsupported = 5
	rowCFASignal      = 6
	rowFPSame         = 0 << 3
	rowFPAtCFA        = 1 << 3
	rowFPUnknown      = 2 << 3
)

// MaxExecMaps is the most mappings with rows one process has (MAX_EXEC_MAPS).
const MaxExecMaps = 256

// NativeTablesBuilt: the program unwinds native stacks with tables on this
// architecture (rows are compiled for x86_64 alone so far); elsewhere a
// stack copy must serve.
const NativeTablesBuilt = runtime.GOARCH == "amd64"

// DefaultUnwindRows is the default budget of rows for all objects together
// (8 bytes each): Debian's libruby 3.1 has about 69,000, libc 28,000.
const DefaultUnwindRows = 1 << 20

// maxObjectRows bounds one object's rows (ROW_SEARCH in ruby.bpf.c).
const maxObjectRows = 1 << 24

// rowPageShift: an object's page index has an entry per 1<<rowPageShift
// bytes of its code (ROW_PAGE_SHIFT).
const rowPageShift = 10

// maxObjectPages bounds one object's page index (1 GiB of code): past it,
// its rows are searched whole.
const maxObjectPages = 1 << 20

// EncodeRows encodes an x86_64 table as the program reads it: rows from
// base (the object virtual address of row pc 0), rules the program does not
// model (a return address not at CFA-8, offsets out of range) as
// unsupported, and runs of rows that encode alike as one.
func EncodeRows(t *native.Table) (rows []UnwindRow, base uint64, err error) {
	if t.Arch != native.ArchX86_64 {
		return nil, 0, errors.New("unwind rows: only x86_64 tables are encoded")
	}
	if len(t.Rows) == 0 {
		return nil, 0, errors.New("unwind rows: empty table")
	}
	base = t.Rows[0].Start
	// At most a row each: sized once (growing it allocated 4 MB for a
	// libruby's 0.5).
	rows = make([]UnwindRow, 0, len(t.Rows))
	for _, r := range t.Rows {
		if r.Start-base > 0xffffffff {
			break // the rest is out of a row's reach: no rule there
		}
		e := UnwindRow{Pc: uint32(r.Start - base), Kind: encodeKind(r)}
		switch e.Kind & 7 {
		case rowCFASP, rowCFAFP, rowCFAPLT:
			e.CfaOff = int16(r.CFAOffset)
		}
		if e.Kind&7 == rowCFAPLT {
			e.FpOff = int8(r.PLTThreshold)
		} else if e.Kind&^7 == rowFPAtCFA {
			e.FpOff = int8(r.FP.Offset / 8)
		}
		if n := len(rows); n > 0 && rows[n-1].Kind == e.Kind && rows[n-1].CfaOff == e.CfaOff && rows[n-1].FpOff == e.FpOff {
			continue
		}
		rows = append(rows, e)
	}
	if len(rows) > maxObjectRows {
		return nil, 0, fmt.Errorf("unwind rows: %d rows, more than %d", len(rows), maxObjectRows)
	}
	return rows, base, nil
}

// pageIndex is the page index of an object's encoded rows (sorted by pc,
// the first at pc 0), as the program reads it (unwind_pages): for each
// 1<<rowPageShift bytes of code from pc 0 to the last row's, the index of
// the row in force at its start (First) and of that in force at the next
// one's start, or the last row (Last). It is nil for rows past
// maxObjectPages.
func pageIndex(rows []UnwindRow) []RowPage {
	if len(rows) == 0 {
		return nil
	}
	n := uint64(rows[len(rows)-1].Pc)>>rowPageShift + 1
	if n > maxObjectPages {
		return nil
	}
	pages := make([]RowPage, n)
	i := 0
	for p := range pages {
		start := uint64(p) << rowPageShift
		for i+1 < len(rows) && uint64(rows[i+1].Pc) <= start {
			i++
		}
		pages[p].First = uint32(i)
		if p > 0 {
			pages[p-1].Last = uint32(i)
		}
	}
	pages[n-1].Last = uint32(len(rows) - 1)
	return pages
}

// encodeKind is a row's ROW_CFA_* | ROW_FP_*.
func encodeKind(r native.Row) uint8 {
	var cfa uint8
	switch r.CFA {
	case native.CFANone:
		return rowCFANone
	case native.CFAOutermost:
		return rowCFAOutermost
	case native.CFASignal:
		return rowCFASignal
	case native.CFAStackPointer:
		cfa = rowCFASP
	case native.CFAFramePointer:
		cfa = rowCFAFP
	case native.CFAPLT:
		cfa = rowCFAPLT
		if r.PLTThreshold > 15 || r.FP.Kind != native.RegSame {
			return rowCFAUnsupported
		}
	default:
		return rowCFAUnsupported
	}
	if r.CFAOffset != int32(int16(r.CFAOffset)) || r.RA != (native.RegRule{Kind: native.RegAtCFA, Offset: -8}) {
		return rowCFAUnsupported
	}
	switch r.FP.Kind {
	case native.RegSame:
		return cfa | rowFPSame
	case native.RegAtCFA:
		if r.FP.Offset%8 == 0 && r.FP.Offset/8 == int32(int8(r.FP.Offset/8)) {
			return cfa | rowFPAtCFA
		}
	}
	return cfa | rowFPUnknown
}

// rowSpan is where one object's rows are in the program's rows, and its
// page index in the program's pages (npages 0: none).
type rowSpan struct {
	first, n      uint32
	pages, npages uint32
	base          uint64
}

// ErrNoRowRoom: the budget of rows (Options.UnwindRows) is spent.
var ErrNoRowRoom = errors.New("unwind rows: budget spent")

// loadRows puts an object's rows into the program once, with their page
// index where the budget of pages has room: key names the object's
// identity (the same file in every process that maps it). It returns
// where they are and base, the object virtual address of row pc 0.
func (s *Sampler) loadRows(key string, t *native.Table) (rowSpan, error) {
	if sp, ok := s.rowSpans[key]; ok {
		return sp, nil
	}
	rows, base, err := EncodeRows(t)
	if err != nil {
		return rowSpan{}, err
	}
	if uint64(s.rowsUsed)+uint64(len(rows)) > uint64(s.objs.UnwindRows.MaxEntries()) {
		return rowSpan{}, fmt.Errorf("%w (%d rows for %s)", ErrNoRowRoom, len(rows), key)
	}
	if err := writeMapped(s.objs.UnwindRows, s.rowsUsed, rows); err != nil {
		return rowSpan{}, fmt.Errorf("unwind rows: %w", err)
	}
	sp := rowSpan{first: s.rowsUsed, n: uint32(len(rows)), base: base}
	s.rowsUsed += sp.n
	// Without room for its pages, an object's rows are searched whole.
	if pages := pageIndex(rows); len(pages) > 0 && uint64(s.pagesUsed)+uint64(len(pages)) <= uint64(s.objs.UnwindPages.MaxEntries()) {
		if err := writeMapped(s.objs.UnwindPages, s.pagesUsed, pages); err != nil {
			return rowSpan{}, fmt.Errorf("unwind pages: %w", err)
		}
		sp.pages, sp.npages = s.pagesUsed, uint32(len(pages))
		s.pagesUsed += sp.npages
	}
	if s.rowSpans == nil {
		s.rowSpans = map[string]rowSpan{}
	}
	s.rowSpans[key] = sp
	return sp, nil
}

// writeMapped writes values into an mmapable array map from index at,
// through a mapping of the pages they fall in alone, for as long as it
// takes: the kernel maps every page of the map at once, and the rows
// mapped whole for the recording were 8 MiB of the recorder's resident
// memory. (An array map's values lie 8-byte aligned: T's size must be a
// multiple of 8.)
func writeMapped[T any](m *ebpf.Map, at uint32, values []T) error {
	if len(values) == 0 {
		return nil
	}
	size := int64(unsafe.Sizeof(values[0]))
	if size%8 != 0 || uint32(size) != m.ValueSize() {
		return fmt.Errorf("values of %d bytes for a map of %d", size, m.ValueSize())
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(values))), int64(len(values))*size)
	start := int64(at) * size
	off := start &^ int64(os.Getpagesize()-1)
	mem, err := unix.Mmap(m.FD(), off, int(start+int64(len(b))-off), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map entries %d to %d: %w", at, int64(at)+int64(len(values)), err)
	}
	copy(mem[start-off:], b)
	return unix.Munmap(mem)
}

// SetExecMaps makes maps (at most MaxExecMaps, not overlapping) the
// process's mappings with rows: its samples carry native frames from then
// on.
func (s *Sampler) SetExecMaps(pid int, maps []ExecMap) error {
	if len(maps) > MaxExecMaps {
		maps = maps[:MaxExecMaps]
	}
	var pm rubyProcMaps
	n := copy(pm.Maps[:], maps)
	sort.Slice(pm.Maps[:n], func(i, j int) bool { return pm.Maps[i].Start < pm.Maps[j].Start })
	for i := 1; i < n; i++ {
		if pm.Maps[i].Start < pm.Maps[i-1].End {
			return fmt.Errorf("pid %d: mappings %#x and %#x overlap", pid, pm.Maps[i-1].Start, pm.Maps[i].Start)
		}
	}
	pm.N = uint32(n)
	// Rows the program cached for this process's old mappings are stale.
	s.execGen++
	pm.Gen = s.execGen
	if err := s.objs.ProcUnwind.Update(uint32(pid), &pm, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("pid %d: unwind mappings: %w", pid, err)
	}
	return nil
}

// RemoveExecMaps stops unwinding pid's stacks natively.
func (s *Sampler) RemoveExecMaps(pid int) { s.objs.ProcUnwind.Delete(uint32(pid)) }

// UnwindMappings loads the rows of every executable file mapping in maps
// (objects from objs, which knows where the process's files are) and makes
// them pid's mappings with rows. It returns how many have rows, and why
// the first that has none could not (an object without call frame
// information, the budget spent). An object's table is compiled only if
// its rows are not loaded yet, and released once they are (see
// native.LoadOptions.TableOnly).
func (s *Sampler) UnwindMappings(pid int, maps []native.Mapping, objs *native.Objects) (int, error) {
	var out []ExecMap
	var first error
	for _, m := range maps {
		if native.IsJITMapping(m) {
			// Listed without rows: the program steps over its frames.
			out = append(out, ExecMap{Start: m.Start, End: m.Limit})
			continue
		}
		if !m.Exec || m.Path == "" || m.Path[0] != '/' && m.Path != native.VDSOPath {
			continue
		}
		o := objs.Get(m.Path)
		err := o.Err()
		if err == nil {
			key := m.Path
			if id := o.BuildID(); id != "" {
				key = "build-id:" + id
			}
			sp, loaded := s.rowSpans[key]
			if !loaded {
				var t *native.Table
				if t, err = o.Table(native.ArchX86_64); err == nil {
					sp, err = s.loadRows(key, t)
				}
			}
			if err == nil {
				// Its rows are loaded for good: an object loaded for its
				// table alone lets it go.
				o.ReleaseTable()
				// The mapping puts the object's vaddr v at m.Start + (v - VAddr(m.Offset)).
				out = append(out, ExecMap{Start: m.Start, End: m.Limit, Base: m.Start - o.VAddr(m.Offset) + sp.base,
					Rows: sp.first, Nrows: sp.n, Pages: sp.pages, Npages: sp.npages})
				continue
			}
		}
		if first == nil {
			first = fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	if len(out) == 0 {
		return 0, first
	}
	return len(out), errors.Join(first, s.SetExecMaps(pid, out))
}
