package rubybuild

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"strings"

	"github.com/rubyperf/rubyperf/debuginfo"
)

// Relocatable objects (ET_REL) are what scripts/gen-tables.sh feeds to
// `rubyperf offsets --format go`: scripts/layout-probe.c and a few of Ruby's
// own .c files compiled with -g inside a configured source tree and merged
// with `ld -r`. They have no segments and unrelocated DWARF, so the version
// and the DWARF are read differently from a linked Ruby.

// isRelocatable says e is an object file rather than a linked executable or
// library.
func (e *elfFile) isRelocatable() bool { return e.f.Type == elf.ET_REL }

// relocatableVersion reads the ruby_version string an object defines (the
// probe spells it from the tree's version.h, as version.c does): the symbol's
// value is an offset in its section.
func (e *elfFile) relocatableVersion() (Version, error) {
	s := e.f.SectionByType(elf.SHT_SYMTAB)
	if s == nil {
		return Version{}, ErrNotRuby
	}
	if s.Size/uint64(elf.Sym64Size) > maxSymbols {
		return Version{}, fmt.Errorf("%s: %s has more than %d symbols", e.path, s.Name, maxSymbols)
	}
	var syms []elf.Symbol
	if err := debuginfo.Guard(func() error {
		var err error
		syms, err = e.f.Symbols()
		return err
	}); err != nil {
		return Version{}, fmt.Errorf("%s: %s: %w", e.path, s.Name, err)
	}
	for _, sym := range syms {
		if sym.Name != "ruby_version" || sym.Section == elf.SHN_UNDEF || sym.Section >= elf.SHN_LORESERVE {
			continue
		}
		if int(sym.Section) >= len(e.f.Sections) {
			return Version{}, fmt.Errorf("%s: ruby_version: section %d does not exist", e.path, sym.Section)
		}
		sec := e.f.Sections[sym.Section]
		b, err := e.sectionData(sec)
		if err != nil {
			return Version{}, fmt.Errorf("%s: ruby_version: %w", e.path, err)
		}
		if sym.Value >= uint64(len(b)) {
			return Version{}, fmt.Errorf("%s: ruby_version: offset %#x is outside %s", e.path, sym.Value, sec.Name)
		}
		b = b[sym.Value:]
		if len(b) > 32 {
			b = b[:32]
		}
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return Version{}, fmt.Errorf("%s: ruby_version: no string end within 32 bytes", e.path)
		}
		return ParseVersion(string(b[:i]))
	}
	return Version{}, ErrNotRuby
}

// loadRelocatedDWARF reads the DWARF of an object file with its relocations
// applied (in an object, .debug_info refers to .debug_str and the other units
// through relocations; debug/elf applies them for ET_REL files). The sections
// are bounded by maxDWARFBytes before any is read.
func (e *elfFile) loadRelocatedDWARF() (*dwarf.Data, int, error) {
	var total uint64
	info := 0
	for _, s := range e.f.Sections {
		if !strings.HasPrefix(s.Name, ".debug_") && !strings.HasPrefix(s.Name, ".zdebug_") &&
			!strings.HasPrefix(s.Name, ".rela.debug_") && !strings.HasPrefix(s.Name, ".rel.debug_") {
			continue
		}
		if s.Type == elf.SHT_NOBITS {
			continue
		}
		if s.Size > maxDWARFBytes-total {
			return nil, 0, fmt.Errorf("%s: DWARF sections are over the %d-byte limit", e.path, maxDWARFBytes)
		}
		total += s.Size
		if s.Name == ".debug_info" || s.Name == ".debug_types" {
			info += int(s.Size)
		}
	}
	if e.f.Section(".debug_info") == nil {
		return nil, 0, errNoDWARF
	}
	var d *dwarf.Data
	err := debuginfo.Guard(func() error {
		var err error
		d, err = e.f.DWARF()
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: DWARF: %w", e.path, err)
	}
	return d, info, nil
}
