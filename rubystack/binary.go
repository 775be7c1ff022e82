package rubystack

import (
	"errors"
	"fmt"
	"sort"
	"strings"
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
}

// OpenOptions tune how a Binary's debug information is found.
type OpenOptions struct {
	// DebugFile names a separate debug file explicitly (--debug-file).
	DebugFile string
	// Root is the filesystem the binary lives in, for finding debug files:
	// "/" (the default) or /proc/PID/root for a process in a container.
	Root string

	// mappedAs is the binary's path inside Root when path is a /proc alias.
	mappedAs string
}

// OpenBinary opens path and reads what identifies it as Ruby.
func OpenBinary(path string, opts OpenOptions) (*Binary, error) {
	e, err := openELF(path)
	if err != nil {
		return nil, err
	}
	b := &Binary{Path: path, elf: e, Arch: e.arch(), BuildID: e.buildID()}
	if opts.mappedAs != "" {
		b.Path = opts.mappedAs
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
	if b.Version, err = readVersion(e, b.syms); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dbg := opts.DebugFile
	if dbg == "" {
		dbg = findDebugFile(e, b.Path, opts.Root)
	}
	if dbg != "" {
		d, err := openELF(dbg)
		if err != nil {
			return nil, fmt.Errorf("debug file: %w", err)
		}
		if id := d.buildID(); opts.DebugFile != "" && id != "" && b.BuildID != "" && id != b.BuildID {
			d.Close()
			return nil, fmt.Errorf("debug file %s has build-id %s, but %s has %s", dbg, id, path, b.BuildID)
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

// UnsupportedError says a Ruby has neither DWARF nor a built-in table row.
type UnsupportedError struct {
	Path      string
	Version   Version
	Arch      string
	Supported []string // table rows, "VERSION/ARCH"
	Cause     error    // why DWARF could not be used
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: Ruby %s (%s) has no debug information and no built-in layout (built in: %s); "+
		"install its debug symbols (e.g. the -dbgsym package) or pass --debug-file: %v",
		e.Path, e.Version, e.Arch, strings.Join(e.Supported, ", "), e.Cause)
}

// ErrUnsupported is matched by errors.Is for an *UnsupportedError.
var ErrUnsupported = errors.New("unsupported ruby")

func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Layout returns the struct layout of this Ruby: from the DWARF of the binary
// or its debug file when present, else from the built-in table for its
// version and arch.
func (b *Binary) Layout() (*Layout, error) {
	l, dwarfErr := b.LayoutFromDWARF()
	if dwarfErr == nil {
		return l, nil
	}
	if row, ok := tableRow(b.Version, b.Arch); ok {
		return resolveLayout(b.Version, b.Arch, "table:"+b.Version.String()+"/"+b.Arch, row.Structs, row.Constants)
	}
	return nil, &UnsupportedError{Path: b.Path, Version: b.Version, Arch: b.Arch, Supported: tableKeys(), Cause: dwarfErr}
}

// LayoutFromDWARF reads the layout from DWARF only.
func (b *Binary) LayoutFromDWARF() (*Layout, error) {
	structs, consts, src, err := b.dwarfStructs()
	if err != nil {
		return nil, err
	}
	return resolveLayout(b.Version, b.Arch, src, structs, consts)
}

func (b *Binary) dwarfStructs() (Structs, map[string]int64, string, error) {
	var errs []string
	for _, e := range []*elfFile{b.elf, b.debug} {
		if e == nil {
			continue
		}
		d, infoBytes, err := e.loadDWARF()
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
func (b *Binary) Anchors(l *Layout) Anchors { return b.findAnchors(l) }

func tableKeys() []string {
	var out []string
	for _, r := range builtinLayouts {
		out = append(out, r.Version+"/"+r.Arch)
	}
	sort.Strings(out)
	return out
}

func tableRow(v Version, arch string) (tableLayout, bool) {
	for _, r := range builtinLayouts {
		if r.Version == v.String() && r.Arch == arch {
			return r, true
		}
	}
	return tableLayout{}, false
}
