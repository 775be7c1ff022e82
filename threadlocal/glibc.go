package threadlocal

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Bounds on what is believed of the target.
const (
	maxModID        = 1 << 20 // TLS module ids (one per loaded object with TLS)
	maxDTVEntry     = 256     // bytes of one dtv_t
	maxFieldOffset  = 1 << 16 // offset of a field in a glibc structure
	maxLinkMaps     = 1 << 14 // objects loaded in all namespaces
	maxNamespaces   = 64      // link-map namespaces (glibc has DL_NNS = 16)
	maxSlotLists    = 1 << 12 // dtv_slotinfo_list entries
	maxSlotsPerList = 1 << 16 // slots in one of them
	maxStaticTLS    = 1 << 30 // bytes between tp and a static TLS block
)

// glibc's values of l_tls_offset that are not an offset (include/link.h, for
// TLS_TCB_AT_TP targets such as x86_64 where NO_TLS_OFFSET is 0).
const (
	noTLSOffset            = 0  // NO_TLS_OFFSET: no static block; dynamic unless relocation asks for one
	forcedDynamicTLSOffset = -1 // FORCED_DYNAMIC_TLS_OFFSET: a thread allocated a dynamic block
)

// Offsets of the public members of struct link_map (<link.h>) and struct
// r_debug; only later members are glibc's private business.
const (
	linkMapHeader  = 40 // l_addr, l_name, l_ld, l_next, l_prev
	linkMapAddr    = 0
	linkMapLD      = 16
	linkMapNext    = 24
	linkMapPrev    = 32
	rDebugMap      = 8  // after int r_version and its padding
	rDebugNext     = 40 // struct r_debug_extended r_next (glibc 2.35+, r_version >= 2)
	rDebugVersion2 = 2
)

// desc is one libthread_db descriptor: glibc's nptl_db/thread_dbP.h
// DB_DEFINE_DESC, a const uint32_t[3] of the member's size in bits, its
// number of elements (arrays; 1 otherwise), and its offset in the structure.
type desc struct {
	bits, count, offset uint32
}

// layout is what Find needs of glibc's private structures, read from the
// descriptors the glibc in the target exports for libthread_db.
type layout struct {
	dtvp       uint64 // pthread dtvp: offset of header.dtv from the thread pointer
	dtvEntry   uint64 // sizeof(dtv_t), from the dtv array's element size
	dtvVal     uint64 // dtv_t pointer.val
	dtvCounter uint64 // dtv_t counter
	modid      uint64 // link_map l_tls_modid
	tlsOffset  uint64 // link_map l_tls_offset
	slotList   uint64 // rtld_global _dl_tls_dtv_slotinfo_list
	listLen    uint64 // dtv_slotinfo_list len
	listNext   uint64 // dtv_slotinfo_list next
	listSlots  uint64 // dtv_slotinfo_list slotinfo[]
	slotSize   uint64 // sizeof(struct dtv_slotinfo)
	slotGen    uint64 // dtv_slotinfo gen
	slotMap    uint64 // dtv_slotinfo map
}

// readDesc reads descriptor _thread_db_NAME of libc o from the target.
func readDesc(mem Memory, o *object, name string) (desc, error) {
	s, ok := o.sym("_thread_db_" + name)
	if !ok {
		return desc{}, fmt.Errorf("%s exports no _thread_db_%s", o.path, name)
	}
	if s.Size != 0 && s.Size != 12 {
		return desc{}, fmt.Errorf("%s: _thread_db_%s has %d bytes, not 12", o.path, name, s.Size)
	}
	var b [12]byte
	if err := mem.ReadAt(b[:], o.bias+s.Value); err != nil {
		return desc{}, fmt.Errorf("_thread_db_%s: %w", name, err)
	}
	return desc{
		bits:   binary.LittleEndian.Uint32(b[0:]),
		count:  binary.LittleEndian.Uint32(b[4:]),
		offset: binary.LittleEndian.Uint32(b[8:]),
	}, nil
}

// readSizeof reads _thread_db_sizeof_NAME (a const uint32_t, bytes).
func readSizeof(mem Memory, o *object, name string) (uint64, error) {
	s, ok := o.sym("_thread_db_sizeof_" + name)
	if !ok {
		return 0, fmt.Errorf("%s exports no _thread_db_sizeof_%s", o.path, name)
	}
	var b [4]byte
	if err := mem.ReadAt(b[:], o.bias+s.Value); err != nil {
		return 0, fmt.Errorf("_thread_db_sizeof_%s: %w", name, err)
	}
	return uint64(binary.LittleEndian.Uint32(b[:])), nil
}

// readLayout reads and checks the descriptors of libc (or, before glibc
// 2.34, libpthread) o.
func readLayout(mem Memory, o *object) (*layout, error) {
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	// field is a pointer or size_t member: 64 bits, one element, aligned.
	field := func(name string, within uint64) uint64 {
		d, err := readDesc(mem, o, name)
		if err != nil {
			fail(err)
			return 0
		}
		if d.bits != 64 || d.count != 1 || d.offset%8 != 0 || uint64(d.offset)+8 > within {
			fail(fmt.Errorf("%s: _thread_db_%s is {%d bits, %d, offset %d}, not a word within %d bytes",
				o.path, name, d.bits, d.count, d.offset, within))
		}
		return uint64(d.offset)
	}
	// array is an array member: returns its element size in bytes.
	array := func(name string) (elem, offset uint64) {
		d, err := readDesc(mem, o, name)
		if err != nil {
			fail(err)
			return 0, 0
		}
		if d.bits == 0 || d.bits%64 != 0 || d.bits/8 > maxDTVEntry || d.offset > maxFieldOffset {
			fail(fmt.Errorf("%s: _thread_db_%s is {%d bits, %d, offset %d}, not an array of words",
				o.path, name, d.bits, d.count, d.offset))
			return 0, 0
		}
		return uint64(d.bits / 8), uint64(d.offset)
	}

	var l layout
	sizeofPthread, err := readSizeof(mem, o, "pthread")
	if err != nil {
		return nil, err
	}
	if sizeofPthread > maxFieldOffset {
		return nil, fmt.Errorf("%s: sizeof(struct pthread) %d is not plausible", o.path, sizeofPthread)
	}
	l.dtvp = field("pthread_dtvp", sizeofPthread)
	// The dtv pseudo-structure is the DTV array itself, at offset 0.
	var dtvOff uint64
	l.dtvEntry, dtvOff = array("dtv_dtv")
	if firstErr == nil && dtvOff != 0 {
		fail(fmt.Errorf("%s: _thread_db_dtv_dtv at offset %d, not 0", o.path, dtvOff))
	}
	l.dtvVal = field("dtv_t_pointer_val", l.dtvEntry)
	l.dtvCounter = field("dtv_t_counter", l.dtvEntry)
	l.modid = field("link_map_l_tls_modid", maxFieldOffset)
	l.tlsOffset = field("link_map_l_tls_offset", maxFieldOffset)
	l.slotList = field("rtld_global__dl_tls_dtv_slotinfo_list", maxFieldOffset)
	l.listLen = field("dtv_slotinfo_list_len", maxFieldOffset)
	l.listNext = field("dtv_slotinfo_list_next", maxFieldOffset)
	l.slotSize, l.listSlots = array("dtv_slotinfo_list_slotinfo")
	l.slotGen = field("dtv_slotinfo_gen", l.slotSize)
	l.slotMap = field("dtv_slotinfo_map", l.slotSize)
	if firstErr != nil {
		return nil, firstErr
	}
	if n, err := readSizeof(mem, o, "dtv_slotinfo"); err == nil && n != l.slotSize {
		return nil, fmt.Errorf("%s: sizeof(struct dtv_slotinfo) %d, but its array's elements have %d bytes", o.path, n, l.slotSize)
	}
	return &l, nil
}

// linkMap is one entry of the dynamic linker's list of loaded objects.
type linkMap struct {
	addr  uint64 // of the struct link_map
	lAddr uint64 // l_addr: the object's load bias
	lLD   uint64 // l_ld: its dynamic section in memory
}

// walkLinkMaps lists the loaded objects of every namespace, from the
// dynamic linker's _r_debug at rdebug, in the list's order.
func walkLinkMaps(mem Memory, rdebug uint64) ([]linkMap, error) {
	var out []linkMap
	seen := map[uint64]bool{}
	seenDebug := map[uint64]bool{}
	for ns := 0; rdebug != 0; ns++ {
		if ns >= maxNamespaces || seenDebug[rdebug] {
			return nil, fmt.Errorf("r_debug: more than %d namespaces, or a loop", maxNamespaces)
		}
		seenDebug[rdebug] = true
		var hdr [16]byte
		if err := mem.ReadAt(hdr[:], rdebug); err != nil {
			return nil, fmt.Errorf("r_debug at %#x: %w", rdebug, err)
		}
		version := int32(binary.LittleEndian.Uint32(hdr[0:]))
		if version < 1 || version > 64 {
			return nil, fmt.Errorf("r_debug at %#x: version %d (the dynamic linker has not set it up yet?)", rdebug, version)
		}
		prev := uint64(0)
		for lm := binary.LittleEndian.Uint64(hdr[rDebugMap:]); lm != 0; {
			if len(out) >= maxLinkMaps {
				return nil, fmt.Errorf("link_map list: more than %d objects", maxLinkMaps)
			}
			if seen[lm] {
				return nil, fmt.Errorf("link_map list loops at %#x", lm)
			}
			seen[lm] = true
			var b [linkMapHeader]byte
			if err := mem.ReadAt(b[:], lm); err != nil {
				return nil, fmt.Errorf("link_map at %#x: %w", lm, err)
			}
			if p := binary.LittleEndian.Uint64(b[linkMapPrev:]); p != prev {
				return nil, fmt.Errorf("link_map at %#x: l_prev %#x, not %#x (the list is changing?)", lm, p, prev)
			}
			out = append(out, linkMap{
				addr:  lm,
				lAddr: binary.LittleEndian.Uint64(b[linkMapAddr:]),
				lLD:   binary.LittleEndian.Uint64(b[linkMapLD:]),
			})
			prev, lm = lm, binary.LittleEndian.Uint64(b[linkMapNext:])
		}
		if version < rDebugVersion2 {
			break
		}
		next, err := word(mem, rdebug+rDebugNext)
		if err != nil {
			return nil, fmt.Errorf("r_debug at %#x: r_next: %w", rdebug, err)
		}
		rdebug = next
	}
	return out, nil
}

// is says link map entry m is object o: its load bias is o's and its
// dynamic section o's PT_DYNAMIC.
func (m linkMap) is(o *object) bool {
	return m.lAddr == o.bias && (!o.hasDyn || m.lLD == o.bias+o.dynamic)
}

// loadedAt returns the link_map of object o.
func loadedAt(maps []linkMap, o *object) (uint64, bool) {
	for _, m := range maps {
		if m.is(o) {
			return m.addr, true
		}
	}
	return 0, false
}

// generation returns the DTV generation from which slot modid is link map
// lm's (its dtv_slotinfo gen), from the slot table at rtld_global.
func (l *layout) generation(mem Memory, rtldGlobal, modid, lm uint64) (uint64, error) {
	list, err := word(mem, rtldGlobal+l.slotList)
	if err != nil {
		return 0, fmt.Errorf("_dl_tls_dtv_slotinfo_list: %w", err)
	}
	base := uint64(0)
	for i := 0; ; i++ {
		if list == 0 {
			return 0, fmt.Errorf("module id %d is past the dynamic linker's slot table (%d slots)", modid, base)
		}
		if i >= maxSlotLists {
			return 0, fmt.Errorf("dtv_slotinfo_list: more than %d entries", maxSlotLists)
		}
		n, err := word(mem, list+l.listLen)
		if err != nil {
			return 0, fmt.Errorf("dtv_slotinfo_list at %#x: %w", list, err)
		}
		if n > maxSlotsPerList {
			return 0, fmt.Errorf("dtv_slotinfo_list at %#x: %d slots is not plausible", list, n)
		}
		if modid < base+n {
			break
		}
		base += n
		if list, err = word(mem, list+l.listNext); err != nil {
			return 0, fmt.Errorf("dtv_slotinfo_list next: %w", err)
		}
	}
	slot := list + l.listSlots + (modid-base)*l.slotSize
	m, err := word(mem, slot+l.slotMap)
	if err != nil {
		return 0, fmt.Errorf("dtv_slotinfo %d: %w", modid, err)
	}
	if m != lm {
		return 0, fmt.Errorf("dtv_slotinfo %d names link_map %#x, not %#x (loaded or unloaded meanwhile?)", modid, m, lm)
	}
	gen, err := word(mem, slot+l.slotGen)
	if err != nil {
		return 0, fmt.Errorf("dtv_slotinfo %d: %w", modid, err)
	}
	return gen, nil
}

// Find locates symbol, a TLS symbol some shared object loaded in pid exports.
// mem reads pid's memory. When several loaded objects export it, the first in
// the dynamic linker's list wins. It returns ErrNotLoaded (wrapped) while no
// loaded object exports the symbol; other errors may be transient too (the
// dynamic linker's lists change while a dlopen runs). The Var holds while the
// object stays loaded: after a dlclose, Find again.
func Find(pid int, mem Memory, symbol string) (*Var, error) { return find(pid, mem, symbol, nil) }

// find is Find, remembering what it reads of files in c (when not nil).
func find(pid int, mem Memory, symbol string, c *Files) (*Var, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: not a process id", pid)
	}
	if symbol == "" {
		return nil, fmt.Errorf("pid %d: no symbol named", pid)
	}
	maps, err := readMaps(pid)
	if err != nil {
		return nil, err
	}
	objs, err := loadObjects(pid, maps, symbol, c)
	if err != nil {
		return nil, err
	}
	vdso := uint64(0)
	for _, m := range maps {
		if m.Path == "[vdso]" {
			vdso = m.Start
		}
	}
	return findIn(pid, mem, symbol, objs, vdso)
}

// findIn is Find on the objects pid maps; vdso is where the vDSO is mapped.
func findIn(pid int, mem Memory, symbol string, objs []*object, vdso uint64) (*Var, error) {
	var exporters []*object
	var notTLS *object
	for _, o := range objs {
		if s, ok := o.sym(symbol); ok {
			if elf.ST_TYPE(s.Info) == elf.STT_TLS {
				exporters = append(exporters, o)
			} else if notTLS == nil {
				notTLS = o
			}
		}
	}
	if len(exporters) == 0 {
		if notTLS != nil {
			return nil, fmt.Errorf("pid %d: %s exports %s, but not as a thread-local variable", pid, notTLS.path, symbol)
		}
		return nil, fmt.Errorf("pid %d: %s: %w", pid, symbol, ErrNotLoaded)
	}

	if libc := muslLibc(objs); libc != nil {
		return findMusl(pid, mem, symbol, objs, exporters, libc, vdso)
	}

	// The dynamic linker's list of loaded objects. The loader is in its own
	// list, which tells its real place among mappings of its file.
	var maps []linkMap
	var ldso *object
	var walkErr error
	for _, o := range objs {
		rdebug, ok := o.sym("_r_debug")
		if !ok {
			continue
		}
		if _, ok := o.sym("_rtld_global"); !ok {
			continue
		}
		m, err := walkLinkMaps(mem, o.bias+rdebug.Value)
		if err != nil {
			walkErr = err
			continue
		}
		if _, ok := loadedAt(m, o); ok {
			maps, ldso = m, o
			break
		}
	}
	if ldso == nil {
		if walkErr != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, walkErr)
		}
		return nil, fmt.Errorf("pid %d: no glibc dynamic linker (_r_debug, _rtld_global) is loaded", pid)
	}

	// glibc's descriptors for libthread_db: in libc.so.6 since 2.34,
	// libpthread.so.0 before; any loaded copy will do, they are constants.
	var libc *object
	for _, o := range objs {
		if _, ok := o.sym("_thread_db_pthread_dtvp"); ok {
			if _, ok := loadedAt(maps, o); ok {
				libc = o
				break
			}
		}
	}
	if libc == nil {
		return nil, fmt.Errorf("pid %d: no loaded object exports glibc's _thread_db_pthread_dtvp (not glibc, or a glibc without libthread_db descriptors)", pid)
	}
	if libc.machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("pid %d: %s is %v: only x86_64 is implemented", pid, libc.path, libc.machine)
	}
	l, err := readLayout(mem, libc)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}

	// The exporting object, first in the dynamic linker's order.
	var obj *object
	var lm uint64
	for _, m := range maps {
		for _, o := range exporters {
			if m.is(o) {
				obj, lm = o, m.addr
				break
			}
		}
		if obj != nil {
			break
		}
	}
	if obj == nil {
		return nil, fmt.Errorf("pid %d: %s is mapped but not in the dynamic linker's list (being loaded or unloaded): %w",
			pid, exporters[0].path, ErrNotLoaded)
	}
	s, _ := obj.sym(symbol)
	if !obj.hasTLS || s.Value > obj.tlsSize || s.Size > obj.tlsSize-s.Value {
		return nil, fmt.Errorf("pid %d: %s: %s at %#x (%d bytes) is outside its TLS segment", pid, obj.path, symbol, s.Value, s.Size)
	}

	modid, err := word(mem, lm+l.modid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: l_tls_modid: %w", pid, obj.path, err)
	}
	off, err := word(mem, lm+l.tlsOffset)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: l_tls_offset: %w", pid, obj.path, err)
	}
	tlsOffset := int64(off)
	if modid == 0 {
		return nil, fmt.Errorf("pid %d: %s has no TLS module id yet: %w", pid, obj.path, ErrNotLoaded)
	}
	if modid > maxModID {
		return nil, fmt.Errorf("pid %d: %s: TLS module id %d is not plausible", pid, obj.path, modid)
	}
	v := &Var{
		Object:       obj.path,
		ModID:        modid,
		Offset:       s.Value,
		DTVPointer:   int64(l.dtvp),
		DTVEntrySize: int64(l.dtvEntry),
		DTVVal:       int64(l.dtvVal),
		DTVCounter:   int64(l.dtvCounter),
	}
	switch {
	case tlsOffset == noTLSOffset || tlsOffset == forcedDynamicTLSOffset:
	case tlsOffset > 0 && tlsOffset <= maxStaticTLS:
		// x86_64 is TLS variant II: static blocks lie below the thread pointer.
		v.Static, v.TPOffset = true, -tlsOffset
	default:
		return nil, fmt.Errorf("pid %d: %s: l_tls_offset %d is not plausible", pid, obj.path, tlsOffset)
	}
	rtld, _ := ldso.sym("_rtld_global")
	if rtld.Size != 0 && l.slotList+8 > rtld.Size {
		return nil, fmt.Errorf("pid %d: _dl_tls_dtv_slotinfo_list at offset %d is past _rtld_global's %d bytes", pid, l.slotList, rtld.Size)
	}
	if v.Generation, err = l.generation(mem, ldso.bias+rtld.Value, modid, lm); err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", pid, obj.path, err)
	}
	return v, nil
}
