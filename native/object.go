package native

import (
	"debug/elf"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/go-delve/delve/pkg/dwarf/frame"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/safefile"
)

// Bounds on what is loaded from one object file.
const (
	maxCFIBytes = 64 << 20 // .eh_frame or .debug_frame
)

// Object is an ELF file's unwinding and symbol information, loaded once.
type Object struct {
	Path  string
	fdes  []*frame.FrameDescriptionEntry // sorted by Begin
	syms  []symbol                       // FUNC symbols, sorted by start
	loads []*elf.Prog                    // PT_LOAD segments
	err   error
	// entry is a program's entry point (ELF e_entry of an executable, or of
	// a position-independent one with an interpreter); 0 for a library.
	entry uint64
	// cfiThin: the call frame information found, its debug file's
	// included, covers fewer than minOwnCFICoverage of its functions.
	cfiThin bool

	// A file without .symtab (a distro's stripped library) is named from its
	// separate debug file's .symtab, found when an address first misses.
	id         debuginfo.Identity
	opts       LoadOptions
	findOnce   sync.Once // the debug file looked for (findDebugFile)
	foundDebug string
	debugOnce  sync.Once
	debugSyms  []symbol // from the debug file, sorted by start
	debugFile  string

	// The call frame rules found at each address unwound through (nil:
	// none), read-only once made: a recording passes the same few
	// addresses again and again.
	framesMu  sync.Mutex
	frames    map[uint64]*frame.FrameContext
	callSites map[uint64]bool // return addresses checked by callEndsAt

	tableMu  sync.Mutex // the compiled unwind table (Table)
	tableDid bool       // compiled (or failed), once
	table    *Table
	tableErr error
}

// maxCachedFrames bounds an Object's cache of call frame rules.
const maxCachedFrames = 1 << 16

// frameAt returns the call frame rules at vaddr, or nil when the file's
// call frame information has none or they cannot be read.
func (o *Object) frameAt(vaddr uint64) *frame.FrameContext {
	o.framesMu.Lock()
	ctx, ok := o.frames[vaddr]
	o.framesMu.Unlock()
	if ok {
		return ctx
	}
	if fde := o.fde(vaddr); fde != nil {
		if debuginfo.Guard(func() error {
			var err error
			ctx, err = fde.EstablishFrame(vaddr)
			return err
		}) != nil {
			ctx = nil
		}
	}
	o.framesMu.Lock()
	if o.frames == nil {
		o.frames = make(map[uint64]*frame.FrameContext)
	}
	if len(o.frames) < maxCachedFrames {
		o.frames[vaddr] = ctx
	}
	o.framesMu.Unlock()
	return ctx
}

// LoadOptions tune where an Object's separate debug file is looked for.
type LoadOptions struct {
	// Debuginfo finds debug files (debuginfod, --debug-file); nil: the
	// local filesystem only (/usr/lib/debug, .gnu_debuglink).
	Debuginfo *debuginfo.Finder
	// Name is the file's path as its process saw it, inside Root (where
	// .gnu_debuglink candidates are, and how messages name it); default: the
	// path loaded.
	Name string
	// Root is the filesystem the file lives in; default "/".
	Root string
	// TableOnly loads the file for its unwind table alone (the BPF
	// program's rows): its symbols are not read, its call frame
	// information is let go once the table is compiled, and the table once
	// ReleaseTable is called. Unwind and Symbol find nothing in it. A
	// libruby's table, its call frame information and symbols held 3.9 MB
	// for as long as the recording ran.
	TableOnly bool
}

type symbol struct {
	start, size uint64
	name        string
}

// LoadObject reads path's CFI and symbols. A file that is not ELF, or has no
// CFI, gives an Object that unwinds nothing and the error says why.
func LoadObject(path string) *Object { return LoadObjectWith(path, LoadOptions{}) }

// LoadObjectWith is LoadObject, with where to look for a debug file.
func LoadObjectWith(path string, opts LoadOptions) *Object {
	o := &Object{Path: path, opts: opts}
	o.err = debuginfo.Guard(func() error { return o.load() })
	return o
}

// BuildID is the object's GNU build-id, hex, or "" when it has none (or
// could not be read).
func (o *Object) BuildID() string {
	if o == nil {
		return ""
	}
	return o.id.BuildID
}

// ThinCFI says the object's call frame information, its separate debug
// file's included when one was found, covers fewer than half of its
// functions: native stacks through the rest stop there (musl's libc
// without its debug file).
func (o *Object) ThinCFI() bool { return o != nil && o.cfiThin }

// Err says why the object cannot unwind, if it cannot.
func (o *Object) Err() error { return o.err }

func (o *Object) load() error {
	f, err := safefile.Open(o.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	ef, err := debuginfo.NewELF(f)
	if err != nil {
		return err
	}
	o.id = debuginfo.ReadIdentity(ef)
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			o.loads = append(o.loads, p)
		case elf.PT_INTERP:
			o.entry = ef.Entry
		}
	}
	if ef.Type == elf.ET_EXEC {
		o.entry = ef.Entry
	}
	byBegin := func() { sort.Slice(o.fdes, func(i, j int) bool { return o.fdes[i].Begin() < o.fdes[j].Begin() }) }
	// Each symbol table is read once, when first needed: the coverage
	// counts the functions of .dynsym (else .symtab), the names come from
	// .symtab (else .dynsym), and TableOnly needs no names.
	tables := make(map[elf.SectionType][]symbol, 2)
	funcsOf := func(first, second elf.SectionType) []symbol {
		for _, typ := range []elf.SectionType{first, second} {
			funcs, read := tables[typ]
			if !read {
				funcs = tableFuncs(ef, typ)
				tables[typ] = funcs
			}
			if len(funcs) > 0 {
				return funcs
			}
		}
		return nil
	}
	o.fdes = readCFI(ef)
	byBegin()
	if o.Path != VDSOPath {
		funcs := funcsOf(elf.SHT_DYNSYM, elf.SHT_SYMTAB)
		if cfiCoverage(o.fdes, funcs) < minOwnCFICoverage {
			o.fdes = append(o.fdes, o.debugCFI()...)
			byBegin()
			o.cfiThin = cfiCoverage(o.fdes, funcs) < minOwnCFICoverage
		}
	}
	if o.opts.TableOnly {
		if len(o.fdes) == 0 {
			return fmt.Errorf("%s: no call frame information", o.Path)
		}
		return nil
	}
	// Sorted only now: cfiCoverage looks at the first maxCoverageFuncs of
	// the same slice in the table's order.
	o.syms = funcsOf(elf.SHT_SYMTAB, elf.SHT_DYNSYM) // .symtab has everything .dynsym has
	sort.Slice(o.syms, func(i, j int) bool { return o.syms[i].start < o.syms[j].start })
	if len(o.fdes) == 0 {
		return fmt.Errorf("%s: no call frame information", o.Path)
	}
	return nil
}

// readCFI parses ef's .eh_frame and .debug_frame; a section that cannot
// be read or parsed gives nothing.
func readCFI(ef *elf.File) []*frame.FrameDescriptionEntry {
	var all frame.FrameDescriptionEntries
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		s := ef.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size > maxCFIBytes {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(s.Open(), maxCFIBytes))
		if err != nil {
			continue
		}
		var fdes frame.FrameDescriptionEntries
		ehAddr := uint64(0)
		if name == ".eh_frame" {
			ehAddr = s.Addr
		}
		if err := debuginfo.Guard(func() error {
			var err error
			fdes, err = frame.Parse(data, ef.ByteOrder, 0, 8, ehAddr)
			return err
		}); err != nil {
			continue
		}
		all = append(all, fdes...)
	}
	return all
}

// minOwnCFICoverage: an object whose own call frame information covers
// fewer of its functions than this share has its separate debug file's
// read too. musl's libc is built without unwind tables (-fno-unwind-tables
// unless --enable-debug, which moves them to .debug_frame, and strip takes
// that to the debug file: Alpine's musl-dbg, Debian's musl-dbgsym): four
// FDEs of crt code cover none of its 1,600 functions, and every native
// stack in it stops.
const minOwnCFICoverage = 0.5

// cfiCoverage is the share of the file's functions (funcs, those .dynsym
// defines, else .symtab's; the first maxCoverageFuncs of them) whose entry
// the FDEs (sorted by Begin) cover; 1 when fewer than minThinFuncs lack
// them (none named: nothing says what is missing). Functions, not bytes: a
// small library's PLT and crt code, which have none, can outweigh its own
// code.
func cfiCoverage(fdes []*frame.FrameDescriptionEntry, funcs []symbol) float64 {
	funcs = funcs[:min(len(funcs), maxCoverageFuncs)]
	covered := 0
	for _, fn := range funcs {
		pc := fn.start
		i := sort.Search(len(fdes), func(i int) bool { return fdes[i].Begin() > pc }) - 1
		if i >= 0 && fdes[i].Cover(pc) {
			covered++
		}
	}
	if len(funcs)-covered < minThinFuncs {
		return 1
	}
	return float64(covered) / float64(len(funcs))
}

// tableFuncs reads the FUNC symbols ef's symbol table of type typ
// (SHT_SYMTAB or SHT_DYNSYM) defines, in the table's order; nil when the
// table is missing, malformed or unreadable.
func tableFuncs(ef *elf.File, typ elf.SectionType) []symbol {
	if debuginfo.CheckSymbolTable(ef, typ) != nil {
		return nil
	}
	read := ef.Symbols
	if typ == elf.SHT_DYNSYM {
		read = ef.DynamicSymbols
	}
	all, err := read()
	if err != nil {
		return nil
	}
	return definedFuncs(all)
}

// definedFuncs are the FUNC symbols of all that the file defines.
func definedFuncs(all []elf.Symbol) []symbol {
	var funcs []symbol
	for _, s := range all {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Section != elf.SHN_UNDEF {
			funcs = append(funcs, symbol{s.Value, s.Size, s.Name})
		}
	}
	return funcs
}

// minThinFuncs: fewer functions without call frame information than this
// do not make a file thin: a program's crt code (deregister_tm_clones,
// frame_dummy, ...) has none, and is most of a small program's functions.
const minThinFuncs = 16

// maxCoverageFuncs bounds the functions cfiCoverage looks at.
const maxCoverageFuncs = 1 << 16

// debugCFI reads the call frame information of the object's separate debug
// file (.debug_frame; same virtual addresses), when one is found whose
// build-id is not another's (funcSymbolsOf's rule).
func (o *Object) debugCFI() []*frame.FrameDescriptionEntry {
	path := o.findDebugFile()
	if path == "" {
		return nil
	}
	var fdes []*frame.FrameDescriptionEntry
	debuginfo.Guard(func() error {
		f, err := safefile.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		ef, err := debuginfo.NewELF(f)
		if err != nil {
			return err
		}
		if id := debuginfo.ReadIdentity(ef).BuildID; id != "" && o.id.BuildID != "" && id != o.id.BuildID {
			return fmt.Errorf("%s: build-id %s, want %s", path, id, o.id.BuildID)
		}
		fdes = readCFI(ef)
		return nil
	})
	return fdes
}

// maxFDEOverlap bounds the look-back past FDEs that start below vaddr but
// end before it (FDEs do not overlap in practice; a few may in odd files).
const maxFDEOverlap = 8

// fde returns the FDE covering vaddr.
func (o *Object) fde(vaddr uint64) *frame.FrameDescriptionEntry {
	i := sort.Search(len(o.fdes), func(i int) bool { return o.fdes[i].Begin() > vaddr }) - 1
	for k := 0; i >= 0 && k < maxFDEOverlap; i, k = i-1, k+1 {
		if o.fdes[i].Cover(vaddr) {
			return o.fdes[i]
		}
	}
	return nil
}

// Symbol names the function holding vaddr, and the offset into it. An
// address the file's own symbols do not cover, in a file without .symtab,
// is looked up in its separate debug file's .symtab (same virtual
// addresses), found the first time one misses.
//
// A program's entry code that no function symbol covers is named
// EntryName: musl's crt1 defines _start in assembly with no symbol type
// (so no FUNC symbol, stripped or not), and a stripped program has none.
func (o *Object) Symbol(vaddr uint64) (string, uint64, bool) {
	if name, off, ok := lookupSymbol(o.syms, vaddr); ok {
		return name, off, true
	}
	if !(o.id.HasSymtab || o.Path == "" || o.Path == VDSOPath || o.opts.TableOnly) {
		o.debugOnce.Do(o.loadDebugSymbols)
		if name, off, ok := lookupSymbol(o.debugSyms, vaddr); ok {
			return name, off, true
		}
	}
	if o.entry != 0 && vaddr >= o.entry && vaddr-o.entry < maxEntryCode && !o.funcBetween(o.entry, vaddr) {
		return EntryName, vaddr - o.entry, true
	}
	return "", 0, false
}

// EntryName names a program's entry code when no symbol does.
const EntryName = "_start"

// maxEntryCode bounds the entry code named EntryName: the instructions
// from the entry point to the call that never returns (glibc's _start is
// 38 bytes, musl's 34).
const maxEntryCode = 64

// funcBetween says whether a function symbol starts in (from, to].
func (o *Object) funcBetween(from, to uint64) bool {
	for _, syms := range [][]symbol{o.syms, o.debugSyms} {
		i := sort.Search(len(syms), func(i int) bool { return syms[i].start > from })
		if i < len(syms) && syms[i].start <= to {
			return true
		}
	}
	return false
}

// DebugFile is the separate debug file whose symbols name this object's
// addresses, once one was needed and found; "" otherwise.
func (o *Object) DebugFile() string {
	if o.id.HasSymtab || o.opts.TableOnly {
		return ""
	}
	o.debugOnce.Do(o.loadDebugSymbols)
	return o.debugFile
}

func lookupSymbol(syms []symbol, vaddr uint64) (string, uint64, bool) {
	i := sort.Search(len(syms), func(i int) bool { return syms[i].start > vaddr }) - 1
	if i < 0 {
		return "", 0, false
	}
	s := syms[i]
	if s.size != 0 && vaddr >= s.start+s.size {
		return "", 0, false
	}
	return s.name, vaddr - s.start, true
}

// findDebugFile looks for the object's separate debug file once (a
// debuginfod that does not answer is waited for once): its path, or "".
func (o *Object) findDebugFile() string {
	o.findOnce.Do(func() {
		name := o.opts.Name
		if name == "" {
			name = o.Path
		}
		path, err := o.opts.Debuginfo.Find(debuginfo.Request{ID: o.id, Name: name, Root: o.opts.Root})
		if err == nil {
			o.foundDebug = path
		}
	})
	return o.foundDebug
}

// loadDebugSymbols finds the debug file and reads its .symtab functions.
func (o *Object) loadDebugSymbols() {
	path := o.findDebugFile()
	if path == "" {
		return
	}
	var syms []symbol
	if debuginfo.Guard(func() error {
		var err error
		syms, err = funcSymbolsOf(path, o.id.BuildID)
		return err
	}) != nil || len(syms) == 0 {
		return
	}
	o.debugSyms, o.debugFile = syms, path
}

// funcSymbolsOf reads the FUNC symbols of a debug file's .symtab; a
// build-id other than want (when both have one) refuses the file.
func funcSymbolsOf(path, want string) ([]symbol, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := debuginfo.NewELF(f)
	if err != nil {
		return nil, err
	}
	if id := debuginfo.ReadIdentity(ef).BuildID; id != "" && want != "" && id != want {
		return nil, fmt.Errorf("%s: build-id %s, want %s", path, id, want)
	}
	s := ef.SectionByType(elf.SHT_SYMTAB)
	if s == nil {
		return nil, fmt.Errorf("%s: no .symtab", path)
	}
	if err := debuginfo.CheckSymbolTable(ef, elf.SHT_SYMTAB); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	all, err := ef.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := definedFuncs(all)
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

// VAddr converts a file offset (a mapping's pgoff plus the distance into
// it) into the object's virtual address.
func (o *Object) VAddr(fileOffset uint64) uint64 {
	for _, p := range o.loads {
		if fileOffset >= p.Off && fileOffset < p.Off+p.Filesz {
			return fileOffset - p.Off + p.Vaddr
		}
	}
	return fileOffset
}
