package native

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
)

// claimed is what the crafted files below claim a table holds: a sparse
// file has that many bytes (zeros) for free.
const claimed = 512 << 20

// claimSize copies the ELF library src to dst with the size of section
// name (in its section header) set to claimed, the file grown sparsely to
// hold it.
func claimSize(t *testing.T, src, dst, name string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	idx := -1
	for i, s := range ef.Sections {
		if s.Name == name {
			idx = i
		}
	}
	if idx < 0 || ef.Class != elf.ELFCLASS64 {
		t.Fatalf("%s: no section %s in a 64-bit file", src, name)
	}
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	hdr := b[shoff+uint64(idx)*64:]
	binary.LittleEndian.PutUint64(hdr[0x20:], claimed) // sh_size
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(dst, int64(ef.Sections[idx].Offset)+claimed+int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

// allocated is what fn allocates on the heap, in all.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLoadObjectBoundsWhatTheFileClaims: a mapped library whose headers
// claim a 512 MiB section-name table, or a 512 MiB string table for its
// .symtab, is loaded allocating under 32 MiB: the first is refused in one
// line naming the file and the bound; the second still unwinds and is
// named from .dynsym, its .symtab left unread.
func TestLoadObjectBoundsWhatTheFileClaims(t *testing.T) {
	dir := t.TempDir()
	src := debuginfodtest.CLib(t, dir)
	const most = 32 << 20

	names := filepath.Join(dir, "names.so")
	claimSize(t, src, names, ".shstrtab")
	var o *Object
	if n := allocated(func() { o = LoadObject(names) }); n > most {
		t.Errorf("a claimed %d-byte section-name table: %d bytes allocated, want under %d", claimed, n, most)
	}
	if err := o.Err(); err == nil || !strings.Contains(err.Error(), names) || !strings.Contains(err.Error(), "section-name table") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("a claimed %d-byte section-name table: %v, want one line naming the file and the table", claimed, err)
	}

	strtab := filepath.Join(dir, "strtab.so")
	claimSize(t, src, strtab, ".strtab")
	if n := allocated(func() { o = LoadObject(strtab) }); n > most {
		t.Errorf("a claimed %d-byte .strtab: %d bytes allocated, want under %d", claimed, n, most)
	}
	if err := o.Err(); err != nil {
		t.Errorf("a claimed %d-byte .strtab: %v, want the object loaded for unwinding", claimed, err)
	}
	exported, _ := debuginfodtest.SymbolAddr(t, src, debuginfodtest.ExportedFunc)
	if !named(o, exported, debuginfodtest.ExportedFunc) {
		t.Errorf("a claimed %d-byte .strtab: %s is not named from .dynsym", claimed, debuginfodtest.ExportedFunc)
	}
}
