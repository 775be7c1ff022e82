package rubybuild

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/safefile"
)

// Limits on what is read from an ELF file. Files come from target processes and
// from users, so every read is bounded.
const (
	maxSymbols      = 4 << 20   // symbols per table; libruby has ~20k
	maxSectionBytes = 256 << 20 // one non-DWARF section read into memory
)

// elfFile is an opened ELF object with its symbol tables. It never panics on a
// malformed file: debug/elf can, so every call into it is guarded.
type elfFile struct {
	path string
	osf  *os.File
	f    *elf.File
	size int64

	fdeOnce sync.Once
	fdeEnds map[uint64]uint64 // .eh_frame's FDEs, start to end (fdeEnd)
}

func openELF(path string) (ef *elfFile, err error) {
	osf, st, err := safefile.OpenStat(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			osf.Close()
		}
	}()
	f, err := debuginfo.NewELF(osf)
	if err != nil {
		return nil, err
	}
	return &elfFile{path: path, osf: osf, f: f, size: st.Size()}, nil
}

func (e *elfFile) Close() error { return e.osf.Close() }

// arch names the machine in the words users know.
func (e *elfFile) arch() string {
	switch e.f.Machine {
	case elf.EM_X86_64:
		return "x86_64"
	case elf.EM_AARCH64:
		return "aarch64"
	}
	return e.f.Machine.String()
}

// sectionData reads a whole section, refusing absurd sizes.
func (e *elfFile) sectionData(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("section %s has no data in the file", s.Name)
	}
	if s.Size > maxSectionBytes {
		return nil, fmt.Errorf("section %s: %d bytes is over the %d limit", s.Name, s.Size, maxSectionBytes)
	}
	var b []byte
	err := debuginfo.Guard(func() error {
		r := io.LimitReader(s.Open(), int64(s.Size))
		var err error
		b, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	if uint64(len(b)) != s.Size {
		return nil, fmt.Errorf("section %s: %d of its %d bytes are in the file", s.Name, len(b), s.Size)
	}
	return b, nil
}

// symbolTable names where a symbol was found.
type symbolTable string

const (
	fromDynsym    symbolTable = "dynsym"
	fromSymtab    symbolTable = "symtab"
	fromDebugFile symbolTable = "debug-file symtab"
)

// symbol is one ELF symbol of interest.
type symbol struct {
	Name  string
	Value uint64 // st_value: a virtual address, or for STT_TLS an offset in the module's TLS block
	Size  uint64
	Type  elf.SymType
	From  symbolTable
}

// symbols reads the symbols whose names are in want from .dynsym and .symtab.
// .symtab wins where both have a name (it has the local ones too).
func (e *elfFile) symbols(want map[string]bool, from symbolTable) (map[string]symbol, error) {
	out := map[string]symbol{}
	add := func(syms []elf.Symbol, t symbolTable) {
		for _, s := range syms {
			if !want[s.Name] || s.Section == elf.SHN_UNDEF {
				continue
			}
			if _, dup := out[s.Name]; dup && t == fromDynsym {
				continue
			}
			out[s.Name] = symbol{Name: s.Name, Value: s.Value, Size: s.Size, Type: elf.ST_TYPE(s.Info), From: t}
		}
	}
	for _, tab := range []struct {
		typ  elf.SectionType
		from symbolTable
	}{{elf.SHT_DYNSYM, fromDynsym}, {elf.SHT_SYMTAB, from}} {
		s := e.f.SectionByType(tab.typ)
		if s == nil {
			continue
		}
		if err := debuginfo.CheckSymbolTable(e.f, tab.typ); err != nil {
			return nil, fmt.Errorf("%s: %w", e.path, err)
		}
		var syms []elf.Symbol
		err := debuginfo.Guard(func() error {
			var err error
			if tab.typ == elf.SHT_DYNSYM {
				syms, err = e.f.DynamicSymbols()
			} else {
				syms, err = e.f.Symbols()
			}
			return err
		})
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%s: %s: %w", e.path, s.Name, err)
		}
		add(syms, tab.from)
	}
	return out, nil
}

// hasSymtab says whether the file has a full symbol table.
func (e *elfFile) hasSymtab() bool { return e.f.SectionByType(elf.SHT_SYMTAB) != nil }

// readVaddr reads n bytes at virtual address addr from the file's loaded
// segments (what the process would see there before relocation).
func (e *elfFile) readVaddr(addr uint64, n int) ([]byte, error) {
	if n < 0 || n > maxSectionBytes {
		return nil, fmt.Errorf("read of %d bytes refused", n)
	}
	for _, p := range e.f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		off := addr - p.Vaddr
		if off+uint64(n) > p.Filesz {
			return nil, fmt.Errorf("%s: %d bytes at %#x run past the segment", e.path, n, addr)
		}
		b := make([]byte, n)
		if _, err := e.osf.ReadAt(b, int64(p.Off+off)); err != nil {
			return nil, fmt.Errorf("%s: read %#x: %w", e.path, addr, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s: address %#x is not in a loaded segment", e.path, addr)
}

// readCString reads a NUL-terminated string of at most max bytes at addr.
func (e *elfFile) readCString(addr uint64, max int) (string, error) {
	for n := max; n > 0; n /= 2 {
		b, err := e.readVaddr(addr, n)
		if err != nil {
			continue // near the end of a segment: try a shorter read
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return string(b[:i]), nil
		}
		return "", fmt.Errorf("%s: no string end within %d bytes at %#x", e.path, max, addr)
	}
	return "", fmt.Errorf("%s: no string at %#x", e.path, addr)
}

// tlsSegment returns the PT_TLS program header, or nil.
func (e *elfFile) tlsSegment() *elf.Prog {
	for _, p := range e.f.Progs {
		if p.Type == elf.PT_TLS {
			return p
		}
	}
	return nil
}

// firstLoadVaddr is the page-aligned address of the first PT_LOAD segment, the
// base against which a mapping's load bias is computed.
func (e *elfFile) firstLoadVaddr() uint64 {
	for _, p := range e.f.Progs {
		if p.Type == elf.PT_LOAD {
			a := p.Align
			if a == 0 {
				a = 1
			}
			return p.Vaddr &^ (a - 1)
		}
	}
	return 0
}

// loadEnd is the end of the image's highest PT_LOAD segment in memory,
// zero-filled data (.bss) included.
func (e *elfFile) loadEnd() uint64 {
	var end uint64
	for _, p := range e.f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr+p.Memsz > end && p.Vaddr+p.Memsz >= p.Vaddr {
			end = p.Vaddr + p.Memsz
		}
	}
	return end
}

// sectionAt names the section holding virtual address addr, or "".
func (e *elfFile) sectionAt(addr uint64) string {
	for _, s := range e.f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && addr >= s.Addr && addr-s.Addr < s.Size {
			return s.Name
		}
	}
	return ""
}
