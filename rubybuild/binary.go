package rubybuild

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/rubyperf/rubyperf/debuginfo"
)

// Binary is the ELF file that holds a Ruby VM: a ruby executable or libruby.
type Binary struct {
	Path      string
	Version   Version
	Arch      string
	BuildID   string
	DebugFile string // the separate debug file in use, or ""

	elf    *elfFile
	debug  *elfFile // separate debug file, or nil
	syms   map[string]symbol
	relocs []relocation

	// Layout and Anchors are worked out once: DWARF parsing and the
	// disassembly fallbacks cost milliseconds, and attaching asks for both
	// several times.
	mu           sync.Mutex
	layout       *Layout
	layoutErr    error
	layoutDone   bool
	anchors      Anchors
	anchorsFor   *Layout
	anchorsValid bool
	// refill and refillErr: RefillSites' answer for refillFor (its sweep of
	// the code takes a few hundred milliseconds).
	refill    *Refill
	refillErr error
	refillFor *Layout
	// cache is where a build already seen is found (OpenOptions.Cache), and
	// shared this Binary's entry in it, once its layout is found.
	cache  *Cache
	shared *cachedBuild
}

// OpenOptions tune how a Binary's debug information is found.
type OpenOptions struct {
	// DebugFile names a separate debug file explicitly (--debug-file).
	DebugFile string
	// Root is the filesystem the binary lives in, for finding debug files:
	// "/" (the default) or /proc/PID/root for a process in a container.
	Root string
	// Debuginfo finds debug files beyond the local ones (debuginfod); nil:
	// the local filesystem only.
	Debuginfo *debuginfo.Finder

	// MappedAs is the binary's path inside Root when path is a /proc alias.
	MappedAs string

	// Cache, when set, serves the Layout and Anchors of a build already
	// worked out, and keeps this one's.
	Cache *Cache
}

// OpenBinary opens path and reads what identifies it as Ruby.
func OpenBinary(path string, opts OpenOptions) (*Binary, error) {
	e, err := openELF(path)
	if err != nil {
		return nil, err
	}
	b := &Binary{Path: path, elf: e, Arch: e.arch(), BuildID: debuginfo.ReadIdentity(e.f).BuildID, cache: opts.Cache}
	if opts.MappedAs != "" {
		b.Path = opts.MappedAs
	}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	if b.syms, err = e.symbols(anchorSymbols, fromSymtab); err != nil {
		return nil, err
	}
	if e.isRelocatable() {
		b.Version, err = e.relocatableVersion() // a layout probe (scripts/gen-tables.sh)
	} else {
		b.Version, err = readVersion(e, b.syms)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dbg, err := findDebugFile(e, b.Path, opts)
	if err != nil {
		return nil, err
	}
	if dbg != "" {
		d, err := openELF(dbg)
		if err != nil {
			return nil, fmt.Errorf("debug file: %w", err)
		}
		b.debug, b.DebugFile = d, dbg
		more, err := d.symbols(anchorSymbols, fromDebugFile)
		if err != nil {
			return nil, err
		}
		for n, s := range more {
			if _, have := b.syms[n]; !have {
				b.syms[n] = s
			}
		}
	}
	ok = true
	return b, nil
}

// Close releases the files.
func (b *Binary) Close() error {
	if b.debug != nil {
		b.debug.Close()
	}
	return b.elf.Close()
}

// UnsupportedError says no layout could be found for a Ruby: no usable DWARF
// and no built-in table of its minor line.
type UnsupportedError struct {
	Path      string
	Version   Version
	Arch      string
	Supported []string // table rows, "VERSION/ARCH"
	Cause     error    // why DWARF could not be used
	// DWARFLacks: the DWARF was read, but it lacks what the walker reads: a
	// Ruby whose VM changed in a way rubyperf does not know yet.
	DWARFLacks bool
}

func (e *UnsupportedError) Error() string {
	if e.DWARFLacks {
		return fmt.Sprintf("Ruby %s (%s, %s): its VM is not one rubyperf knows: %v; "+
			"a newer rubyperf may support it", e.Version, e.Arch, e.Path, e.Cause)
	}
	return fmt.Sprintf("Ruby %s (%s, %s): no layout for this build: %v, and no built-in table for Ruby %d.%d/%s; %s",
		e.Version, e.Arch, e.Path, e.Cause, e.Version.Major, e.Version.Minor, e.Arch, fixAdvice)
}

// fixAdvice is what a user can do about a build rubyperf cannot read.
const fixAdvice = "install its debug symbols (e.g. the -dbgsym package), pass --debug-file, or set DEBUGINFOD_URLS"

// Refuse words err as a refusal of this build, in the one shape every
// refusal has: "Ruby V (arch, path): what is wrong; what to do".
func (b *Binary) Refuse(err error) error {
	return fmt.Errorf("Ruby %s (%s, %s): %w; %s", b.Version, b.Arch, b.Path, err, fixAdvice)
}

// ErrUnsupported is matched by errors.Is for an *UnsupportedError.
var ErrUnsupported = errors.New("unsupported ruby")

func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Layout returns the struct layout of this Ruby: from the DWARF of the binary
// or its debug file when present; else the built-in table of its version and
// arch; else the table of the nearest patch release of the same minor line.
// A table layout is a guess about this build (configure flags and patches
// move members): it must pass Reader.CheckLayout against the live process
// before use (NewReader does that); Layout.FromDWARF says which it is.
func (b *Binary) Layout() (*Layout, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.layoutDone {
		b.layoutDone = true
		k, keyed := b.key()
		if keyed {
			if cb := b.cache.get(k); cb != nil {
				b.layout, b.shared = cb.forBinary(b), cb
				return b.layout, nil
			}
		}
		b.layout, b.layoutErr = b.findLayout()
		if keyed && b.layoutErr == nil {
			b.shared = &cachedBuild{elfPath: b.elf.path, debugPath: b.DebugFile, layout: b.layout}
			b.cache.put(k, b.shared)
		}
	}
	return b.layout, b.layoutErr
}

func (b *Binary) findLayout() (*Layout, error) {
	l, dwarfErr := b.LayoutFromDWARF()
	if dwarfErr == nil {
		return l, nil
	}
	if errors.Is(dwarfErr, errLayoutLacks) {
		return nil, &UnsupportedError{Path: b.Path, Version: b.Version, Arch: b.Arch, Supported: tableKeys(),
			Cause: dwarfErr, DWARFLacks: true}
	}
	if v, ok := nearestTable(b.Version, b.Arch); ok {
		row, _ := tableRow(v, b.Arch)
		source := "table:" + v.String() + "/" + b.Arch
		if v != b.Version {
			source += " (nearest to " + b.Version.String() + ")"
		}
		l, err := resolveLayout(b.Version, b.Arch, source, row.Structs, row.Constants)
		if err != nil {
			return nil, err
		}
		// Tables predate flags.during_gc and RSymbol.id: this build's own
		// code gives them.
		b.fillGCRunning(l)
		b.fillSymbolID(l)
		return l, nil
	}
	if errors.Is(dwarfErr, errNoDWARF) {
		id := b.BuildID
		if id == "" {
			id = "none"
		}
		dwarfErr = fmt.Errorf("no DWARF in the file and no separate debug file found (build-id %s)", id)
	}
	return nil, &UnsupportedError{Path: b.Path, Version: b.Version, Arch: b.Arch, Supported: tableKeys(), Cause: dwarfErr}
}

// sourceDefines adds to consts, read from a build's DWARF, the constants
// Ruby spells only as #define (RUBYPERF_*: the tables' probe made them
// enumerators), from the built-in table of the same release; a release
// without a table goes without them.
func sourceDefines(v Version, arch string, consts map[string]int64) {
	row, ok := tableRow(v, arch)
	if !ok {
		return
	}
	for name, value := range row.Constants {
		if _, have := consts[name]; !have && strings.HasPrefix(name, "RUBYPERF_") {
			consts[name] = value
		}
	}
}

// FromDWARF says the layout was read from this build's own debug
// information rather than guessed from a table.
func (l *Layout) FromDWARF() bool { return strings.HasPrefix(l.Source, "dwarf:") }

// nearestTable picks the built-in table for v: its own version, else the
// newest earlier patch release of the same minor line (members only move
// forward), else the oldest later one.
func nearestTable(v Version, arch string) (Version, bool) {
	var below, above Version
	haveBelow, haveAbove := false, false
	for _, key := range tableKeys() {
		vs, a, ok := strings.Cut(key, "/")
		if !ok || a != arch {
			continue
		}
		t, err := ParseVersion(vs)
		if err != nil || t.Major != v.Major || t.Minor != v.Minor {
			continue
		}
		switch {
		case t == v:
			return t, true
		case t.Less(v) && (!haveBelow || below.Less(t)):
			below, haveBelow = t, true
		case v.Less(t) && (!haveAbove || t.Less(above)):
			above, haveAbove = t, true
		}
	}
	if haveBelow {
		return below, true
	}
	return above, haveAbove
}

// LayoutFromDWARF reads the layout from DWARF only.
func (b *Binary) LayoutFromDWARF() (*Layout, error) {
	structs, consts, src, err := b.dwarfStructs()
	if err != nil {
		return nil, err
	}
	sourceDefines(b.Version, b.Arch, consts)
	return resolveLayout(b.Version, b.Arch, src, structs, consts)
}

func (b *Binary) dwarfStructs() (Structs, map[string]int64, string, error) {
	var errs []string
	for _, e := range []*elfFile{b.elf, b.debug} {
		if e == nil {
			continue
		}
		d, infoBytes, err := e.loadDWARF()
		if errors.Is(err, errNoDWARF) {
			continue // no DWARF at all in this file: not a failure to report
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		structs, consts, err := structsFromDWARF(d, wantedStructs, wantedConstants, infoBytes)
		if err != nil {
			errs = append(errs, e.path+": "+err.Error())
			continue
		}
		if len(structs) == 0 {
			errs = append(errs, e.path+": DWARF has none of Ruby's structs")
			continue
		}
		return structs, consts, "dwarf:" + e.path, nil
	}
	if len(errs) == 0 {
		return nil, nil, "", errNoDWARF
	}
	return nil, nil, "", errors.New(strings.Join(errs, "; "))
}

// Anchors finds the symbols the profiler needs. The layout is used by the
// disassembly fallbacks (it says how far apart the fields they look for are).
func (b *Binary) Anchors(l *Layout) Anchors {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.anchorsValid || b.anchorsFor != l {
		// The cached anchors were found with the cached layout, which is
		// b's only when l is the layout b handed out.
		shared := b.shared != nil && l == b.layout
		var cached *Anchors
		if shared {
			cached = b.cache.anchors(b.shared)
		}
		var a Anchors
		switch {
		case cached != nil:
			// How names the layout they were found with, by its Source.
			a = cached.renamed(b.shared.layout.Source, l.Source)
		case shared:
			a = b.findAnchors(l)
			b.cache.putAnchors(b.shared, a)
		default:
			a = b.findAnchors(l)
		}
		b.anchors, b.anchorsFor, b.anchorsValid = a, l, true
	}
	return b.anchors
}

// File is the path the binary was opened through: Path itself, or a /proc
// alias of a process's mapping (map_files, root).
func (b *Binary) File() string { return b.elf.path }

// Image is where the binary's PT_LOAD segments lie in memory before
// relocation: from the first segment's page to the end of the highest one,
// zero-filled data (.bss) included. A process maps it at a load bias.
func (b *Binary) Image() (start, end uint64) {
	return b.elf.firstLoadVaddr(), b.elf.loadEnd()
}

// shapeTreeStructSymbol is the global rb_shape_tree_t of 4.0+ (3.3 and 3.4
// have the pointer rb_shape_tree_ptr).
const shapeTreeStructSymbol = "rb_shape_tree"
