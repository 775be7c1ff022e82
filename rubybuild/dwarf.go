package rubybuild

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/rubyperf/rubyperf/debuginfo"
)

// maxDWARFBytes caps the decompressed size of all DWARF sections loaded from
// one file. A -ggdb3 static Ruby 3.3 has ~60 MiB of the sections we read.
const maxDWARFBytes = 1 << 30

// dwarfSections are the only .debug_* sections needed to read types and
// enumerators. .debug_line, .debug_loc*, .debug_macro (huge with -ggdb3) and
// .debug_frame are never read here.
var dwarfSections = []string{"abbrev", "info", "str", "str_offsets", "line_str", "addr", "types"}

// errNoDWARF says the file carries no type information.
var errNoDWARF = errors.New("no DWARF type information")

// loadDWARF reads the DWARF sections rubyperf needs from e, decompressing
// SHF_COMPRESSED (zlib, zstd) and legacy .zdebug sections, never more than
// maxDWARFBytes in all.
func (e *elfFile) loadDWARF() (*dwarf.Data, int, error) {
	if e.isRelocatable() {
		return e.loadRelocatedDWARF()
	}
	type section struct {
		name   string
		s      *elf.Section
		legacy bool
		b      []byte
		err    error
	}
	var sections []*section
	var declared uint64 // what the SHF_COMPRESSED headers (or sizes) declare
	legacy := false
	for _, name := range dwarfSections {
		sec := &section{name: name, s: e.f.Section(".debug_" + name)}
		if sec.s == nil {
			if sec.s = e.f.Section(".zdebug_" + name); sec.s == nil {
				continue
			}
			sec.legacy, legacy = true, true
		}
		if sec.s.Type == elf.SHT_NOBITS {
			continue // a stripped file keeps the header of some sections
		}
		declared += sec.s.Size
		sections = append(sections, sec)
	}
	data := map[string][]byte{}
	if !legacy && declared <= maxDWARFBytes {
		// The sizes are known and within the limit: decompress the sections
		// side by side (most of the time to a layout is zlib).
		var wg sync.WaitGroup
		for _, sec := range sections {
			wg.Go(func() { sec.b, sec.err = e.readDebugSection(sec.s, false, maxDWARFBytes) })
		}
		wg.Wait()
		for _, sec := range sections {
			if sec.err != nil {
				return nil, 0, fmt.Errorf("%s: %w", e.path, sec.err)
			}
			data[sec.name] = sec.b
		}
	} else {
		// .zdebug sections declare their size only inside: one at a time,
		// each within what the ones before left of the limit.
		var total uint64
		for _, sec := range sections {
			b, err := e.readDebugSection(sec.s, sec.legacy, maxDWARFBytes-total)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", e.path, err)
			}
			total += uint64(len(b))
			data[sec.name] = b
		}
	}
	if data["info"] == nil || data["abbrev"] == nil {
		return nil, 0, errNoDWARF
	}
	var d *dwarf.Data
	err := debuginfo.Guard(func() error {
		var err error
		d, err = dwarf.New(data["abbrev"], nil, nil, data["info"], nil, nil, nil, data["str"])
		if err != nil {
			return err
		}
		for _, name := range []string{"str_offsets", "line_str", "addr"} {
			if b := data[name]; b != nil {
				if err := d.AddSection(".debug_"+name, b); err != nil {
					return err
				}
			}
		}
		if b := data["types"]; b != nil {
			return d.AddTypes("types", b)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: DWARF: %w", e.path, err)
	}
	return d, len(data["info"]) + len(data["types"]), nil
}

// readDebugSection returns the section's bytes, decompressed, refusing to
// produce more than budget bytes.
func (e *elfFile) readDebugSection(s *elf.Section, legacy bool, budget uint64) ([]byte, error) {
	// debug/elf reports the decompressed size of SHF_COMPRESSED sections in Size.
	if s.Size > budget {
		return nil, fmt.Errorf("section %s: %d bytes decompressed is over the %d-byte DWARF limit", s.Name, s.Size, maxDWARFBytes)
	}
	if s.FileSize > uint64(e.size) {
		return nil, fmt.Errorf("section %s: %d bytes is larger than the file", s.Name, s.FileSize)
	}
	var b []byte
	err := debuginfo.Guard(func() error {
		r, done, err := e.openSection(s)
		if err != nil {
			return err
		}
		defer done()
		b, err = readSized(r, s.Size)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	if uint64(len(b)) > s.Size {
		return nil, fmt.Errorf("section %s: decompresses past its declared %d bytes", s.Name, s.Size)
	}
	if !legacy {
		return b, nil
	}
	// .zdebug_*: "ZLIB", 8-byte big-endian size, zlib stream.
	if len(b) < 12 || string(b[:4]) != "ZLIB" {
		return nil, fmt.Errorf("section %s: bad ZLIB header", s.Name)
	}
	n := binary.BigEndian.Uint64(b[4:12])
	if n > budget {
		return nil, fmt.Errorf("section %s: %d bytes decompressed is over the %d-byte DWARF limit", s.Name, n, maxDWARFBytes)
	}
	zr, err := zlib.NewReader(bytes.NewReader(b[12:])) // klauspost's: about twice as fast
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	out, err := readSized(zr, n)
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	if uint64(len(out)) != n {
		return nil, fmt.Errorf("section %s: decompressed to %d bytes, header says %d", s.Name, len(out), n)
	}
	return out, nil
}

// ELF compression types (Elf64_Chdr.ch_type).
const (
	elfCompressZlib = 1 // ELFCOMPRESS_ZLIB
	elfCompressZstd = 2 // ELFCOMPRESS_ZSTD
)

// openSection reads s decompressed. SHF_COMPRESSED sections are inflated
// here rather than by debug/elf: most of the time to a layout is spent
// inflating .debug_info, and klauspost/compress does it in about half the
// time of the standard library. done releases the decompressor.
func (e *elfFile) openSection(s *elf.Section) (r io.Reader, done func(), err error) {
	nothing := func() {}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		return s.Open(), nothing, nil
	}
	// In memory, the inflater reads bytes directly rather than through a
	// bufio.Reader (a fifth faster). readDebugSection checked FileSize
	// against the file's size.
	b := make([]byte, s.FileSize)
	if _, err := e.osf.ReadAt(b, int64(s.Offset)); err != nil {
		return nil, nil, err
	}
	raw := bytes.NewReader(b)
	// Elf32_Chdr is ch_type, ch_size, ch_addralign (4 bytes each);
	// Elf64_Chdr is ch_type, ch_reserved (4 bytes each), ch_size,
	// ch_addralign (8 bytes each).
	hdr := 12
	if e.f.Class == elf.ELFCLASS64 {
		hdr = 24
	}
	var h [24]byte
	if _, err := io.ReadFull(raw, h[:hdr]); err != nil {
		return nil, nil, fmt.Errorf("compression header: %w", err)
	}
	switch e.f.ByteOrder.Uint32(h[:4]) {
	case elfCompressZlib:
		zr, err := zlib.NewReader(raw)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { zr.Close() }, nil
	case elfCompressZstd:
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxDWARFBytes))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return s.Open(), nothing, nil // debug/elf names what it cannot read
}

// maxPrealloc is the largest section size readSized allocates at once.
const maxPrealloc = 64 << 20

// readSized reads r to its end into one buffer of the size r declares,
// and one byte more if r goes on past it (which the callers refuse): no
// copying as the buffer grows, and no more than size+1 bytes read. A size
// over maxPrealloc is not trusted with one allocation: the buffer grows
// with what r really gives.
func readSized(r io.Reader, size uint64) ([]byte, error) {
	if size > maxPrealloc {
		return io.ReadAll(io.LimitReader(r, int64(size)+1))
	}
	b := make([]byte, size+1)
	n, err := io.ReadFull(r, b)
	switch err {
	case nil: // size+1 bytes: longer than declared
	case io.EOF, io.ErrUnexpectedEOF:
		err = nil
	}
	return b[:n], err
}

// maxMemberDepth bounds how deep nested struct and union members are
// flattened into dotted names (rb_method_definition_struct.body.iseq.iseqptr is 3).
const maxMemberDepth = 4

// structsFromDWARF finds the first complete definition of every struct in
// wantStructs and every enumerator in wantConstants. It stops reading as soon
// as everything is found.
//
// budget bounds the entries read: every entry takes at least one byte of
// .debug_info, so its size is an upper bound for well-formed input, and a
// malformed entry that does not advance the reader cannot loop forever.
func structsFromDWARF(d *dwarf.Data, wantStructs map[string]bool, wantConstants map[string]bool, budget int) (Structs, map[string]int64, error) {
	structs := Structs{}
	consts := map[string]int64{}
	done := func() bool { return len(structs) == len(wantStructs) && len(consts) == len(wantConstants) }
	err := debuginfo.Guard(func() error {
		r := d.Reader()
		for !done() {
			if budget--; budget < 0 {
				return errors.New("more entries than .debug_info has bytes")
			}
			ent, err := r.Next()
			if err != nil {
				return err
			}
			if ent == nil {
				return nil
			}
			switch ent.Tag {
			case dwarf.TagCompileUnit, dwarf.TagPartialUnit, dwarf.TagTypeUnit, dwarf.TagNamespace:
				continue // descend into the unit's top-level entries
			case dwarf.TagStructType, dwarf.TagUnionType, dwarf.TagTypedef:
				name, _ := ent.Val(dwarf.AttrName).(string)
				if decl, _ := ent.Val(dwarf.AttrDeclaration).(bool); !decl && wantStructs[name] {
					if _, seen := structs[name]; !seen {
						if sl, ok := structFromType(d, ent.Offset); ok {
							structs[name] = sl
						}
					}
				}
			case dwarf.TagEnumerationType:
				if ent.Children {
					if err := readEnumerators(r, wantConstants, consts, &budget); err != nil {
						return err
					}
					continue // readEnumerators consumed the children
				}
			}
			if ent.Children {
				r.SkipChildren()
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("DWARF: %w", err)
	}
	return structs, consts, nil
}

func readEnumerators(r *dwarf.Reader, want map[string]bool, out map[string]int64, budget *int) error {
	for {
		if *budget--; *budget < 0 {
			return errors.New("more entries than .debug_info has bytes")
		}
		ent, err := r.Next()
		if err != nil {
			return err
		}
		if ent == nil || ent.Tag == 0 {
			return nil
		}
		if ent.Tag == dwarf.TagEnumerator {
			name, _ := ent.Val(dwarf.AttrName).(string)
			if want[name] {
				if _, seen := out[name]; !seen {
					switch v := ent.Val(dwarf.AttrConstValue).(type) {
					case int64:
						out[name] = v
					case uint64:
						out[name] = int64(v)
					}
				}
			}
		}
		if ent.Children {
			r.SkipChildren()
		}
	}
}

// structFromType resolves the type at off (a struct, union, or typedef of one)
// into a flattened StructLayout.
func structFromType(d *dwarf.Data, off dwarf.Offset) (StructLayout, bool) {
	t, err := d.Type(off)
	if err != nil {
		return StructLayout{}, false
	}
	st, ok := underlyingStruct(t)
	if !ok || st.Incomplete || st.ByteSize <= 0 {
		return StructLayout{}, false
	}
	sl := StructLayout{Size: st.ByteSize, Members: map[string]Member{}}
	flattenMembers(st, "", 0, 0, sl.Members)
	return sl, true
}

func underlyingStruct(t dwarf.Type) (*dwarf.StructType, bool) {
	for i := 0; i < 8; i++ { // typedef chains are short; bound them anyway
		switch v := t.(type) {
		case *dwarf.StructType:
			return v, true
		case *dwarf.TypedefType:
			t = v.Type
		case *dwarf.QualType:
			t = v.Type
		default:
			return nil, false
		}
	}
	return nil, false
}

// flattenMembers records every member of st at base, naming nested members of
// embedded structs and unions with dots; anonymous members lend their fields
// to the parent, as in C.
func flattenMembers(st *dwarf.StructType, prefix string, base int64, depth int, out map[string]Member) {
	for _, f := range st.Field {
		off := base + f.ByteOffset
		name := prefix + f.Name
		if f.Name != "" {
			m := Member{Offset: off, Size: f.Type.Size()}
			if f.BitSize > 0 {
				m.BitSize = f.BitSize
				unit := f.ByteSize // the storage unit, as C declares it
				if unit <= 0 {
					unit = f.Type.Size()
				}
				if f.DataBitOffset != 0 || f.BitOffset == 0 {
					// DWARF 4+: DW_AT_data_bit_offset counts bits from the
					// struct start; the member lives in the unit holding them.
					bits := f.DataBitOffset
					if unit > 0 {
						off = base + (bits/(8*unit))*unit
					}
					m.Offset = off
					m.BitOffset = bits - 8*(off-base)
				} else {
					// DWARF 2-3: DW_AT_bit_offset counts from the unit's most
					// significant bit.
					m.BitOffset = 8*unit - f.BitOffset - f.BitSize
				}
			}
			if _, dup := out[name]; !dup {
				out[name] = m
			}
		}
		if depth >= maxMemberDepth {
			continue
		}
		if pointee, ok := anonymousPointee(f.Type); ok && f.Name != "" {
			// rb_darray(T): a pointer to an anonymous struct of a length
			// and the elements; its members are named after "->", from
			// the pointee's start.
			flattenMembers(pointee, name+"->", 0, depth+1, out)
			continue
		}
		if inner, ok := underlyingStruct(f.Type); ok && !inner.Incomplete {
			p := prefix
			if f.Name != "" {
				p = name + "."
			}
			flattenMembers(inner, p, off, depth+1, out)
		}
	}
}

// anonymousPointee is the struct t points to when t is a pointer to a
// struct with no name of its own (rb_darray's), which no other member
// could lead to by name.
func anonymousPointee(t dwarf.Type) (*dwarf.StructType, bool) {
	for range 8 {
		switch v := t.(type) {
		case *dwarf.PtrType:
			st, ok := underlyingStruct(v.Type)
			if !ok || st.Incomplete || st.StructName != "" {
				return nil, false
			}
			if _, typedef := v.Type.(*dwarf.TypedefType); typedef {
				return nil, false
			}
			return st, true
		case *dwarf.TypedefType:
			t = v.Type
		case *dwarf.QualType:
			t = v.Type
		default:
			return nil, false
		}
	}
	return nil, false
}

// cName is a struct's name as Ruby's source spells it in `struct X` or a typedef.
func cName(s string) string { return strings.TrimPrefix(s, "struct ") }
