package native

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/go-delve/delve/pkg/dwarf/frame"
)

// Bounds on what is loaded from one object file.
const (
	maxCFIBytes    = 64 << 20 // .eh_frame or .debug_frame
	maxSymbolCount = 4 << 20
)

// Object is an ELF file's unwinding and symbol information, loaded once.
type Object struct {
	Path  string
	fdes  []*frame.FrameDescriptionEntry // sorted by Begin
	syms  []symbol                       // FUNC symbols, sorted by start
	loads []*elf.Prog                    // PT_LOAD segments
	err   error
}

type symbol struct {
	start, size uint64
	name        string
}

// LoadObject reads path's CFI and symbols. A file that is not ELF, or has no
// CFI, gives an Object that unwinds nothing and the error says why.
func LoadObject(path string) *Object {
	o := &Object{Path: path}
	o.err = guard(func() error { return o.load() })
	return o
}

// Err says why the object cannot unwind, if it cannot.
func (o *Object) Err() error { return o.err }

func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed input: %v", r)
		}
	}()
	return fn()
}

func (o *Object) load() error {
	f, err := os.Open(o.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Path, err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			o.loads = append(o.loads, p)
		}
	}
	var order binary.ByteOrder = ef.ByteOrder
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
		if err := guard(func() error {
			var err error
			fdes, err = frame.Parse(data, order, 0, 8, ehAddr)
			return err
		}); err != nil {
			continue
		}
		o.fdes = append(o.fdes, fdes...)
	}
	sort.Slice(o.fdes, func(i, j int) bool { return o.fdes[i].Begin() < o.fdes[j].Begin() })
	for _, load := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		syms, err := load()
		if err != nil || len(syms) > maxSymbolCount {
			continue
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Section != elf.SHN_UNDEF {
				o.syms = append(o.syms, symbol{s.Value, s.Size, s.Name})
			}
		}
		if len(o.syms) > 0 {
			break // .symtab has everything .dynsym has
		}
	}
	sort.Slice(o.syms, func(i, j int) bool { return o.syms[i].start < o.syms[j].start })
	if len(o.fdes) == 0 {
		return fmt.Errorf("%s: no call frame information", o.Path)
	}
	return nil
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

// Symbol names the function holding vaddr, and the offset into it.
func (o *Object) Symbol(vaddr uint64) (string, uint64, bool) {
	i := sort.Search(len(o.syms), func(i int) bool { return o.syms[i].start > vaddr }) - 1
	if i < 0 {
		return "", 0, false
	}
	s := o.syms[i]
	if s.size != 0 && vaddr >= s.start+s.size {
		return "", 0, false
	}
	return s.name, vaddr - s.start, true
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
