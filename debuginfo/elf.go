package debuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
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
	_ = guard(func() error {
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

// guard turns a panic inside fn (debug/elf can panic on malformed input)
// into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed input: %v", r)
		}
	}()
	return fn()
}

// fileBuildID reads the build-id of the ELF file f, or "".
func fileBuildID(f *os.File) string {
	var id string
	_ = guard(func() error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return err
		}
		id = ReadIdentity(ef).BuildID
		return nil
	})
	return id
}

// isDebugFileFor says whether f is an ELF file with build-id id that
// carries debug information (DWARF or a .symtab): a stripped copy of the
// file itself has the build-id but nothing to give.
func isDebugFileFor(f *os.File, id string) bool {
	ok := false
	_ = guard(func() error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return err
		}
		got := ReadIdentity(ef)
		ok = got.BuildID == id && (got.HasDWARF || got.HasSymtab)
		return nil
	})
	return ok
}

// BuildIDOf returns the build-id of the ELF file at path, or "".
func BuildIDOf(path string) (string, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var id string
	err = guard(func() error {
		ef, err := elf.NewFile(f)
		if err != nil {
			return fmt.Errorf("%s: not an ELF file: %w", path, err)
		}
		id = ReadIdentity(ef).BuildID
		return nil
	})
	return id, err
}
