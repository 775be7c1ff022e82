package threadlocal

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/safefile"
	"github.com/rubyperf/rubyperf/procmaps"
)

// maxObjects bounds the distinct mapped files examined.
const maxObjects = 1 << 13

func readMaps(pid int) ([]procmaps.Mapping, error) {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return maps, nil
}

// elfInfo is what is needed of one mapped ELF file.
type elfInfo struct {
	machine   elf.Machine
	firstLoad uint64 // vaddr of the lowest segment, the one mapped at file offset 0
	firstOff  uint64 // its file offset
	dynamic   uint64 // PT_DYNAMIC vaddr
	hasDyn    bool
	tlsSize   uint64 // PT_TLS memsz
	hasTLS    bool
	syms      map[string]elf.Symbol // the defined dynamic symbols asked for
}

// object is one ELF file loaded at one place in the target.
type object struct {
	path string // as mapped
	bias uint64 // added to a file vaddr gives the address in the process
	*elfInfo
}

// sym is a defined dynamic symbol of o.
func (o *object) sym(name string) (elf.Symbol, bool) {
	s, ok := o.syms[name]
	return s, ok
}

// wanted says which dynamic symbols Find needs: the caller's symbol, the
// dynamic linker's _r_debug and _rtld_global, glibc's libthread_db
// descriptors, and what tells musl's libc (muslLibc).
func wanted(symbol string) func(string) bool {
	return func(name string) bool {
		switch name {
		case symbol, "_r_debug", "_rtld_global", "_dl_debug_addr", "__tls_get_addr", "__libc_start_main":
			return true
		}
		return strings.HasPrefix(name, "_thread_db_")
	}
}

// loadObjects opens every ELF file pid maps (once per file) and returns it
// once per place it is mapped at (its mapping of file offset 0), in address
// order, with the dynamic symbols looking for symbol needs (wanted). Files
// that are not ELF, or not readable, are skipped. c, when not nil, serves
// files read before and keeps those read now.
func loadObjects(pid int, maps []procmaps.Mapping, symbol string, c *Files) ([]*object, error) {
	pageSize := uint64(os.Getpagesize())
	infos := map[string]*elfInfo{}
	var out []*object
	for _, m := range maps {
		if m.Offset != 0 || m.Inode == 0 || !strings.HasPrefix(m.Path, "/") {
			continue // not a file's first page: anonymous, [vdso], a segment
		}
		key := m.Path + "\x00" + strconv.FormatUint(m.Inode, 10)
		info, seen := infos[key]
		if !seen {
			if len(infos) >= maxObjects {
				return nil, fmt.Errorf("pid %d: more than %d mapped files", pid, maxObjects)
			}
			info, _ = readELF(pid, m, symbol, c) // nil: not ELF, unreadable
			infos[key] = info
		}
		if info == nil || info.firstOff&^(pageSize-1) != 0 {
			continue
		}
		out = append(out, &object{path: m.Path, bias: m.Start - info.firstLoad&^(pageSize-1), elfInfo: info})
	}
	return out, nil
}

// readELF reads m's file: through /proc/PID/map_files, which is the very file
// mapped even if deleted or replaced since, else through /proc/PID/root, the
// target's view of the file system (containers).
func readELF(pid int, m procmaps.Mapping, symbol string, c *Files) (*elfInfo, error) {
	paths := []string{
		fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End),
		filepath.Join(fmt.Sprintf("/proc/%d/root", pid), m.Path),
	}
	var firstErr error
	for _, p := range paths {
		info, err := readELFFile(p, m.Inode, symbol, c)
		if err == nil {
			return info, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

func readELFFile(path string, inode uint64, symbol string, c *Files) (info *elfInfo, err error) {
	f, st, err := safefile.OpenStat(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Ino != inode {
		return nil, fmt.Errorf("%s: inode %d, not the mapped %d (replaced?)", path, sys.Ino, inode)
	}
	key, keyed := keyOf(st, symbol)
	if info, ok := c.get(key); keyed && ok {
		if info == nil {
			return nil, fmt.Errorf("%s: %w", path, errNotELF)
		}
		return info, nil
	}
	defer func() {
		if keyed {
			c.keep(key, info)
		}
	}()
	want := wanted(symbol)
	ef, err := debuginfo.NewELF(f)
	if err != nil {
		return nil, err
	}
	info = &elfInfo{machine: ef.Machine, syms: map[string]elf.Symbol{}}
	haveLoad := false
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			if !haveLoad || p.Vaddr < info.firstLoad {
				info.firstLoad, info.firstOff, haveLoad = p.Vaddr, p.Off, true
			}
		case elf.PT_DYNAMIC:
			info.dynamic, info.hasDyn = p.Vaddr, true
		case elf.PT_TLS:
			info.tlsSize, info.hasTLS = p.Memsz, true
		}
	}
	if !haveLoad {
		return nil, fmt.Errorf("%s: no loadable segment", path)
	}
	if ef.SectionByType(elf.SHT_DYNSYM) == nil {
		return info, nil // no dynamic symbols
	}
	if err := debuginfo.CheckSymbolTable(ef, elf.SHT_DYNSYM); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var syms []elf.Symbol
	if err := debuginfo.Guard(func() error {
		var err error
		syms, err = ef.DynamicSymbols()
		return err
	}); err != nil {
		return info, nil
	}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || !want(s.Name) {
			continue
		}
		if _, dup := info.syms[s.Name]; !dup {
			info.syms[s.Name] = s
		}
	}
	return info, nil
}
