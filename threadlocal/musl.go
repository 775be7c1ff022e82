package threadlocal

import (
	"debug/elf"
	"fmt"
)

// musl keeps a thread's DTV as an array of words (src/internal/pthread_impl.h,
// src/env/__init_tls.c, x86_64): the thread pointer is the thread's struct
// pthread, whose second member, in the part musl marks as ABI ("do not
// change"), is the dtv pointer; dtv[0] is the number of modules the vector
// has slots for, and dtv[id] the address of module id's block (DTP_OFFSET
// is 0). Every thread has a block for every module: dlopen installs one in
// each running thread before it returns (install_new_tls), and musl never
// unloads an object.
const (
	muslDTVPointer = 8 // offsetof(struct pthread, dtv) without TLS_ABOVE_TP
	muslDTVEntry   = 8 // sizeof(uintptr_t)
)

// muslLibc returns the musl libc among objs: musl's libc is its dynamic
// linker too, so one object exports the dynamic linker's __tls_get_addr and
// debugger anchor _dl_debug_addr, and libc's __libc_start_main (glibc
// splits them between ld.so and libc.so, and exports no _dl_debug_addr).
func muslLibc(objs []*object) *object {
	for _, o := range objs {
		_, tls := o.sym("__tls_get_addr")
		_, dbg := o.sym("_dl_debug_addr")
		_, start := o.sym("__libc_start_main")
		if tls && dbg && start {
			return o
		}
	}
	return nil
}

// findMusl is Find in a process whose C library is musl (libc). Module ids
// are not kept anywhere a debugger is meant to read: musl gives them in
// load order, one to each object with a PT_TLS segment (the executable 1
// if it has one, then each library as it is loaded: ldso/dynlink.c
// load_library's ++tls_cnt, which a failed dlopen takes back with the
// objects it loaded), and its list of loaded objects is in that order, so
// an object's id is the count of objects with TLS up to it in the list.
// vdso is where the kernel mapped the vDSO, which musl lists too and has
// no TLS.
func findMusl(pid int, mem Memory, symbol string, objs, exporters []*object, libc *object, vdso uint64) (*Var, error) {
	if libc.machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("pid %d: %s is %v: only x86_64 is implemented", pid, libc.path, libc.machine)
	}
	anchor, _ := libc.sym("_dl_debug_addr")
	debug, err := word(mem, libc.bias+anchor.Value)
	if err != nil {
		return nil, fmt.Errorf("pid %d: musl's _dl_debug_addr: %w", pid, err)
	}
	if debug == 0 {
		return nil, fmt.Errorf("pid %d: musl's dynamic linker has not set up its list yet: %w", pid, ErrNotLoaded)
	}
	// struct debug begins as struct r_debug does (int version, the
	// first object), and struct dso as struct link_map (base, name,
	// dynamic section, next, prev).
	maps, err := walkLinkMaps(mem, debug)
	if err != nil {
		return nil, fmt.Errorf("pid %d: musl's list of loaded objects: %w", pid, err)
	}
	var obj *object
	modid := uint64(0)
	for _, m := range maps {
		o := objectAt(objs, m)
		switch {
		case o == nil && m.lAddr == vdso && vdso != 0:
			continue
		case o == nil:
			return nil, fmt.Errorf("pid %d: musl lists an object at %#x that no mapped file is: its TLS module id cannot be counted", pid, m.lAddr)
		case o.hasTLS:
			modid++
		}
		for _, e := range exporters {
			if o == e {
				obj = o
			}
		}
		if obj != nil {
			break
		}
	}
	if obj == nil {
		return nil, fmt.Errorf("pid %d: %s is mapped but not in musl's list of loaded objects (being loaded?): %w",
			pid, exporters[0].path, ErrNotLoaded)
	}
	s, _ := obj.sym(symbol)
	if !obj.hasTLS || s.Value > obj.tlsSize || s.Size > obj.tlsSize-s.Value {
		return nil, fmt.Errorf("pid %d: %s: %s at %#x (%d bytes) is outside its TLS segment", pid, obj.path, symbol, s.Value, s.Size)
	}
	if modid == 0 || modid > maxModID {
		return nil, fmt.Errorf("pid %d: %s: TLS module id %d is not plausible", pid, obj.path, modid)
	}
	return &Var{
		Object:       obj.path,
		ModID:        modid,
		Offset:       s.Value,
		DTVPointer:   muslDTVPointer,
		DTVEntrySize: muslDTVEntry,
		DTVVal:       0,
		// dtv[0] is the number of slots: a vector with fewer than ModID
		// has no block for the module (Address's generation test).
		DTVCounter: 0,
		Generation: modid,
	}, nil
}

// objectAt is the object of objs that list entry m is, or nil.
func objectAt(objs []*object, m linkMap) *object {
	for _, o := range objs {
		if m.is(o) {
			return o
		}
	}
	return nil
}
