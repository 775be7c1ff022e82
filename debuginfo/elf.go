package debuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// Bounds on what is read from an ELF file to identify it.
const (
	maxNoteBytes   = 64 << 10 // .note.gnu.build-id, .gnu_debuglink
	maxBuildIDHex  = 128      // elfutils' limit: 64 bytes
	minBuildIDHex  = 4        // two bytes: the xx/ directory and a rest
	maxLinkNameLen = 255      // NAME_MAX
)

// Identity is what ties an ELF file to its separate debug file.
type Identity struct {
	BuildID   string // GNU build-id, lowercase hex; "" if none or malformed
	Link      string // .gnu_debuglink file name; "" if none or not a plain name
	LinkCRC   uint32 // CRC32 of the debug file, from .gnu_debuglink
	HasDWARF  bool   // the file has .debug_info of its own
	HasSymtab bool   // the file has a .symtab
}

// ReadIdentity reads f's build-id, debuglink, and whether it carries DWARF
// and a symbol table. It never panics on a malformed file.
func ReadIdentity(f *elf.File) Identity {
	var id Identity
	_ = Guard(func() error {
		if s := f.Section(".note.gnu.build-id"); s != nil {
			if b, err := sectionBytes(s); err == nil {
				id.BuildID = parseBuildIDNote(b, f.ByteOrder)
			}
		}
		if id.BuildID == "" { // some linkers put the note elsewhere
			for _, s := range f.Sections {
				if s.Type == elf.SHT_NOTE && s.Name != ".note.gnu.build-id" {
					if b, err := sectionBytes(s); err == nil {
						if id.BuildID = parseBuildIDNote(b, f.ByteOrder); id.BuildID != "" {
							break
						}
					}
				}
			}
		}
		if s := f.Section(".gnu_debuglink"); s != nil {
			if b, err := sectionBytes(s); err == nil {
				id.Link, id.LinkCRC = parseDebugLink(b, f.ByteOrder)
			}
		}
		if s := f.Section(".debug_info"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			id.HasDWARF = true
		}
		if s := f.Section(".zdebug_info"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			id.HasDWARF = true
		}
		id.HasSymtab = f.SectionByType(elf.SHT_SYMTAB) != nil
		return nil
	})
	return id
}

// sectionBytes reads a small section whole.
func sectionBytes(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS || s.Size > maxNoteBytes {
		return nil, fmt.Errorf("section %s: no data or over %d bytes", s.Name, maxNoteBytes)
	}
	return io.ReadAll(io.LimitReader(s.Open(), maxNoteBytes))
}

// parseBuildIDNote finds the NT_GNU_BUILD_ID note in a note section.
func parseBuildIDNote(b []byte, order interface{ Uint32([]byte) uint32 }) string {
	for len(b) >= 12 {
		namesz := uint64(order.Uint32(b[0:]))
		descsz := uint64(order.Uint32(b[4:]))
		typ := order.Uint32(b[8:])
		name, desc := align4(namesz), align4(descsz)
		if name > uint64(len(b)) || desc > uint64(len(b)) || 12+name+desc > uint64(len(b)) {
			return ""
		}
		if typ == 3 /* NT_GNU_BUILD_ID */ && namesz == 4 && string(b[12:16]) == "GNU\x00" {
			id := hex.EncodeToString(b[12+name : 12+name+descsz])
			if !ValidBuildID(id) {
				return ""
			}
			return id
		}
		b = b[12+name+desc:]
	}
	return ""
}

// parseDebugLink reads .gnu_debuglink: a NUL-terminated file name, padding
// to 4 bytes, and the CRC32 of the debug file. A name that is not a plain
// file name (a path, "." or "..") is refused: it comes from the file.
func parseDebugLink(b []byte, order interface{ Uint32([]byte) uint32 }) (string, uint32) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 || i > maxLinkNameLen {
		return "", 0
	}
	name := string(b[:i])
	off := align4(uint64(i + 1))
	if off+4 > uint64(len(b)) || !plainName(name) {
		return "", 0
	}
	return name, order.Uint32(b[off:])
}

// plainName says whether s is a single file name: no directory part, not
// "." or "..", no control characters.
func plainName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > maxLinkNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// ValidBuildID says whether s is a build-id as this package accepts one:
// lowercase hex, an even number of digits, 2 to 64 bytes.
func ValidBuildID(s string) bool {
	if len(s) < minBuildIDHex || len(s) > maxBuildIDHex || len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Guard runs fn and turns a panic inside it into an error: debug/elf and
// debug/dwarf panic on some malformed files, and every package that reads
// a file another user may have written calls them through Guard.
func Guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed input: %v", r)
		}
	}()
	return fn()
}

// fileBuildID reads the build-id of the ELF file f, or "".
func fileBuildID(f *os.File) string {
	ef, err := NewELF(f)
	if err != nil {
		return ""
	}
	return ReadIdentity(ef).BuildID
}

// isDebugFileFor says whether f is an ELF file with build-id id that
// carries debug information (DWARF or a .symtab): a stripped copy of the
// file itself has the build-id but nothing to give.
func isDebugFileFor(f *os.File, id string) bool {
	ef, err := NewELF(f)
	if err != nil {
		return false
	}
	got := ReadIdentity(ef)
	return got.BuildID == id && (got.HasDWARF || got.HasSymtab)
}

// BuildIDOf returns the build-id of the ELF file at path, or "".
func BuildIDOf(path string) (string, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	ef, err := NewELF(f)
	if err != nil {
		return "", err
	}
	return ReadIdentity(ef).BuildID, nil
}

// Bounds on what debug/elf reads whole from a file: elf.NewFile its section
// headers and its section-name table (decompressed, if compressed: a small
// file can claim gigabytes), File.Symbols and DynamicSymbols a symbol
// table and its string table. Linked objects have tens of sections, a
// section-name table of a few hundred bytes, a string table of a few MiB.
const (
	maxSections     = 1 << 16
	maxSectionNames = 16 << 20
	// MaxSymbols bounds the entries of a symbol table read whole.
	MaxSymbols = 4 << 20
	// MaxStringTable bounds the bytes of the string table it names.
	MaxStringTable = 64 << 20
)

// NewELF is elf.NewFile for a file another user may have written: a file
// whose section headers or section-name table are over the bounds is
// refused before debug/elf reads them, and a panic of debug/elf is an error.
// Errors name the file.
func NewELF(f *os.File) (*elf.File, error) {
	if err := checkHeaders(f); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	var ef *elf.File
	if err := Guard(func() error {
		var err error
		ef, err = elf.NewFile(f)
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: not an ELF file: %w", f.Name(), err)
	}
	return ef, nil
}

// checkHeaders reads from r the ELF header and the section-name table's
// section header (and compression header), and refuses sizes over the
// bounds. What it cannot read it leaves to elf.NewFile to refuse.
func checkHeaders(r io.ReaderAt) error {
	var ident [elf.EI_NIDENT]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil || string(ident[:4]) != elf.ELFMAG {
		return nil
	}
	var order binary.ByteOrder = binary.LittleEndian
	if elf.Data(ident[elf.EI_DATA]) == elf.ELFDATA2MSB {
		order = binary.BigEndian
	}
	is64 := elf.Class(ident[elf.EI_CLASS]) == elf.ELFCLASS64
	word := func(b []byte) uint64 { // a field of the class's width
		if is64 {
			return order.Uint64(b)
		}
		return uint64(order.Uint32(b))
	}
	// Offsets in the ELF header and a section header, and the size of a
	// compression header, per class (elf.h).
	shoffAt, shnumAt, shstrndxAt, shSize, flagsAt, offsetAt, sizeAt, linkAt := 0x20, 0x30, 0x32, 40, 8, 0x10, 0x14, 0x18
	chSizeAt, w := 4, 4
	if is64 {
		shoffAt, shnumAt, shstrndxAt, shSize, flagsAt, offsetAt, sizeAt, linkAt = 0x28, 0x3c, 0x3e, 64, 8, 0x18, 0x20, 0x28
		chSizeAt, w = 8, 8
	}
	var hdr [64]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return nil
	}
	shoff := word(hdr[shoffAt:])
	shnum, shstrndx := uint64(order.Uint16(hdr[shnumAt:])), uint32(order.Uint16(hdr[shstrndxAt:]))
	if shoff == 0 || shoff > math.MaxInt64-uint64(shSize)*maxSections {
		return nil
	}
	section := func(i uint64) ([]byte, bool) {
		b := make([]byte, shSize)
		_, err := r.ReadAt(b, int64(shoff+i*uint64(shSize)))
		return b, err == nil
	}
	if shnum == 0 || shstrndx == uint32(elf.SHN_XINDEX) { // the real values are in section 0
		s0, ok := section(0)
		if !ok {
			return nil
		}
		if shnum == 0 {
			shnum = word(s0[sizeAt:])
		}
		if shstrndx == uint32(elf.SHN_XINDEX) {
			shstrndx = order.Uint32(s0[linkAt:])
		}
	}
	if shnum > maxSections {
		return fmt.Errorf("%d section headers, over the %d allowed", shnum, maxSections)
	}
	if shstrndx == 0 || uint64(shstrndx) >= shnum {
		return nil
	}
	s, ok := section(uint64(shstrndx))
	if !ok {
		return nil
	}
	size := word(s[sizeAt:])
	if word(s[flagsAt:])&uint64(elf.SHF_COMPRESSED) != 0 {
		ch := make([]byte, chSizeAt+w)
		off := word(s[offsetAt:])
		if off > math.MaxInt64 {
			return nil
		}
		if _, err := r.ReadAt(ch, int64(off)); err != nil {
			return nil
		}
		size = word(ch[chSizeAt:])
	}
	if size > maxSectionNames {
		return fmt.Errorf("a section-name table of %d bytes, over the %d allowed", size, maxSectionNames)
	}
	return nil
}

// CheckSymbolTable refuses ef's symbol table of type typ (SHT_SYMTAB or
// SHT_DYNSYM) when it or its string table is over the bounds: both are
// read whole. A file without one passes (reading it gives ErrNoSymbols).
func CheckSymbolTable(ef *elf.File, typ elf.SectionType) error {
	s := ef.SectionByType(typ)
	if s == nil {
		return nil
	}
	if n := s.Size / uint64(elf.Sym64Size); n > MaxSymbols {
		return fmt.Errorf("%s: %d symbols, over the %d allowed", s.Name, n, MaxSymbols)
	}
	if int(s.Link) < len(ef.Sections) && ef.Sections[s.Link].Size > MaxStringTable {
		strs := ef.Sections[s.Link]
		return fmt.Errorf("%s: %d bytes, over the %d allowed", strs.Name, strs.Size, MaxStringTable)
	}
	return nil
}
