package export

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rubyperf/rubyperf/merge"
)

// kernelFile is the object file name perf gives kernel frames; pprof
// treats names starting with '[' as never symbolizable.
const kernelFile = "[kernel.kallsyms]"

// FrameTable interns the frames of merged stacks as the functions,
// locations and mappings a profile's samples point to. pprof (Pprof) and
// OTLP profiles (the agent) have the same three tables; both are built by
// this one, and differ only in how the tables are written out.
//
// What a frame becomes, for both formats:
//
//   - Ruby and C-method frames: a Location with no Mapping and no Address,
//     one per (function, line), whose Function has the Ruby name, the
//     source path as File, and no SystemName. There is no binary to
//     symbolize them against; a made-up mapping would only add a fake
//     address range (and a misleading "File:" in pprof's header). OTLP
//     says mapping 0 is "unknown or not applicable"; Pyroscope and pprof
//     take such locations as they are.
//   - Native and kernel frames: a Location with the frame's Address in its
//     Mapping (Start, Limit, Offset, File, BuildID of the frame), and a
//     Function named by the symbol, whose SystemName is its Name. Kernel
//     frames, which come with no mapping, share one Mapping "[kernel.kallsyms]"
//     over the kernel addresses seen, so that every address falls in its
//     mapping's range and a backend can tell kernel from user code.
//   - A native frame whose mapping is unknown keeps only its Function: no
//     Mapping and no Address. An address with no mapping cannot be
//     symbolized outside the process (no file, no load address), and would
//     only split one function into a location per address.
//   - Pseudo-frames (a thread state, a request label, a limit): a Function
//     of that name, no file, no line.
//
// Every name and file is Printable, in both formats as in every other
// output: a Ruby name or path's bytes that are not UTF-8 read "\xff", not
// U+FFFD, so the same frame reads the same in pprof, in an OTLP backend and
// in a flame graph, and the byte is not lost.
//
// Only symbols get a SystemName: pprof (and backends built on it)
// "demangles" a function whose SystemName equals its Name, and takes any
// name with '<' or "::" for C++: "<main>" would print as "<unknown>",
// "Foo#<=>" as "Foo#". A Function with an empty SystemName counts as
// demangled already and keeps its Ruby name; a mangled C++ symbol of a
// native extension still gets demangled.
type FrameTable struct {
	Functions []Function
	Locations []Location
	// Mappings are in the order first seen; MappingIDs numbers them in
	// address order.
	Mappings []Mapping

	byFrame map[merge.Frame]int // what location gave each frame
	funcs   map[Function]int
	locs    map[Location]int
	maps    map[Mapping]int
	kernel  int // index of the kernel's mapping in Mappings; -1 before its first frame
}

// Function is a function of a FrameTable.
type Function struct {
	Name       string
	SystemName string // Name for a symbol (native and kernel frames), else ""
	File       string // the Ruby source path; "" for others
}

// Location is a location of a FrameTable: one function at one line, or at
// one address of a mapping.
type Location struct {
	Function int   // index in Functions
	Line     int64 // Ruby frames' line; 0 for others
	Mapping  int   // index in Mappings; -1 for none
	Address  uint64
	Type     FrameType
}

// Mapping is a mapping of a FrameTable: where an object file is in memory.
type Mapping struct {
	Start, Limit, Offset uint64
	File, BuildID        string
}

// FrameType is what kind of code a location is in.
type FrameType uint8

const (
	FramePseudo FrameType = iota // a thread state, a request label or a limit: no code
	FrameRuby                    // a Ruby method or block, or a Ruby method written in C
	FrameNative                  // a native function in user space
	FrameKernel                  // a kernel function
)

// NewFrameTable returns an empty table.
func NewFrameTable() *FrameTable {
	return &FrameTable{byFrame: map[merge.Frame]int{}, funcs: map[Function]int{}, locs: map[Location]int{},
		maps: map[Mapping]int{}, kernel: -1}
}

// Location returns the index in Locations of frame f's location, added if
// new.
func (t *FrameTable) Location(f *merge.Frame) int {
	// The same frame comes back on most samples: look it up as it is before
	// cleaning its names and finding its mapping and function.
	if i, ok := t.byFrame[*f]; ok {
		return i
	}
	i := t.newLocation(f)
	t.byFrame[*f] = i
	return i
}

// newLocation is Location for a frame not seen before (its location may
// exist already, for another frame at the same place).
func (t *FrameTable) newLocation(f *merge.Frame) int {
	l := Location{Mapping: -1}
	fn := Function{Name: FrameName(f)}
	switch f.Kind {
	case merge.KindNative, merge.KindKernel:
		l.Type = FrameNative
		if f.Kind == merge.KindKernel {
			l.Type = FrameKernel
		}
		fn.SystemName = fn.Name
		if l.Mapping = t.mapping(f); l.Mapping >= 0 {
			l.Address = f.Addr
		}
	case merge.KindRuby, merge.KindCFunc:
		l.Type = FrameRuby
		fn.File = Printable(f.File)
		l.Line = f.Line
	}
	l.Function = intern(&t.Functions, t.funcs, fn)
	return intern(&t.Locations, t.locs, l)
}

// intern returns the index of v in *list, appended if index (the indexes
// of *list's entries) does not have it.
func intern[T comparable](list *[]T, index map[T]int, v T) int {
	if i, ok := index[v]; ok {
		return i
	}
	i := len(*list)
	*list = append(*list, v)
	index[v] = i
	return i
}

// mapping returns the index in Mappings of a native or kernel frame's
// mapping, or -1 when its mapping is unknown.
func (t *FrameTable) mapping(f *merge.Frame) int {
	if f.MapLimit <= f.MapStart {
		if f.Kind != merge.KindKernel {
			return -1
		}
		// One mapping spans the kernel addresses seen.
		if t.kernel < 0 {
			t.kernel = len(t.Mappings)
			t.Mappings = append(t.Mappings, Mapping{Start: f.Addr, Limit: f.Addr + 1, File: kernelFile})
		}
		m := &t.Mappings[t.kernel]
		m.Start = min(m.Start, f.Addr)
		m.Limit = max(m.Limit, f.Addr+1)
		if m.BuildID == "" {
			m.BuildID = f.BuildID
		}
		return t.kernel
	}
	m := Mapping{Start: f.MapStart, Limit: f.MapLimit, Offset: f.MapOffset, File: Printable(f.File), BuildID: f.BuildID}
	if m.File == "" && f.Kind == merge.KindKernel {
		m.File = kernelFile
	}
	return intern(&t.Mappings, t.maps, m)
}

// MappingIDs numbers Mappings from 1 in address order (the main executable
// usually comes first, the kernel last): ids[i] is the number of
// Mappings[i]. pprof shows the first mapping's file as the profile's; the
// numbers are pprof's Mapping.ID and the index in OTLP's mapping table,
// whose entry 0 stands for none.
func (t *FrameTable) MappingIDs() []int {
	order := make([]int, len(t.Mappings))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int {
		x, y := &t.Mappings[i], &t.Mappings[j]
		return cmp.Or(cmp.Compare(x.Start, y.Start), cmp.Compare(x.Limit, y.Limit),
			strings.Compare(x.File, y.File), cmp.Compare(x.Offset, y.Offset), strings.Compare(x.BuildID, y.BuildID))
	})
	ids := make([]int, len(order))
	for n, i := range order {
		ids[i] = n + 1
	}
	return ids
}
