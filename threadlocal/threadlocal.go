package threadlocal

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory reads another process's address space.
type Memory interface {
	// ReadAt fills p from address addr, or fails; a short read is an error.
	ReadAt(p []byte, addr uint64) error
}

// Var is where a thread-local variable of a loaded shared object lives, for a
// reader that knows only a thread's pointer.
//
// The reader's path (x86_64, TLS variant II, where the thread pointer is
// glibc's struct pthread):
//
//	if Static: addr = tp + TPOffset + Offset
//	dtv = *(tp + DTVPointer)
//	if *(dtv + DTVCounter) < Generation: no block yet   (dtv[0].counter)
//	val = *(dtv + ModID*DTVEntrySize + DTVVal)           (dtv[ModID].pointer.val)
//	if val == 0 || val == TLSDTVUnallocated: no block yet
//	addr = val + Offset
type Var struct {
	Object       string // the shared object's path as mapped
	ModID        uint64 // its TLS module id (link_map l_tls_modid)
	Offset       uint64 // the variable's offset in the module's TLS block (st_value)
	DTVPointer   int64  // offset from the thread pointer of the thread's dtv pointer (struct pthread header.dtv)
	DTVEntrySize int64  // sizeof(dtv_t)
	DTVVal       int64  // offset of pointer.val in dtv_t

	// DTVCounter is the offset of counter in dtv_t. dtv[0].counter is the
	// generation of the thread's DTV: the dynamic linker brings a thread's DTV
	// up to date only when the thread next resolves a dynamic TLS access.
	DTVCounter int64
	// Generation is the DTV generation from which dtv[ModID] belongs to this
	// module (its dtv_slotinfo gen). A thread whose DTV is older has not
	// touched the module since it was loaded: its slot may be stale (a module
	// unloaded before) or past the end of its DTV, and must not be read.
	Generation uint64

	// Static says the dynamic linker put the module's block in static TLS
	// (an initial-exec module, or a TLS-descriptor access it could serve from
	// the static surplus): every thread, even one that never touched it, has
	// the block at tp + TPOffset, and the DTV is not needed.
	Static   bool
	TPOffset int64 // with Static: -l_tls_offset (TLS variant II: the block is below tp)
}

// TLSDTVUnallocated is the value of a DTV slot whose block the thread has not
// allocated yet: glibc's TLS_DTV_UNALLOCATED, ((void *) -1l) in every
// architecture's dl-tls.h, which libthread_db's td_thr_tlsbase also tests.
const TLSDTVUnallocated = ^uint64(0)

// ErrNotLoaded says no loaded object exports the symbol (yet): a process that
// has not required its extension, or is loading it right now. Try later.
var ErrNotLoaded = errors.New("no loaded shared object exports the thread-local symbol")

// Address returns the variable's address for the thread whose thread pointer
// is tp, or ok=false when that thread has no block for the module yet (it
// has never touched it). It is the Go reference of what the BPF program does.
func (v *Var) Address(mem Memory, tp uint64) (addr uint64, ok bool, err error) {
	if v == nil || v.ModID == 0 || v.ModID > maxModID ||
		v.DTVEntrySize <= 0 || v.DTVEntrySize > maxDTVEntry ||
		v.DTVVal < 0 || v.DTVVal+8 > v.DTVEntrySize ||
		v.DTVCounter < 0 || v.DTVCounter+8 > v.DTVEntrySize ||
		v.DTVPointer < 0 || v.DTVPointer > maxFieldOffset {
		return 0, false, errors.New("threadlocal: Var is not one Find returned")
	}
	if tp == 0 {
		return 0, false, nil // a thread whose TLS is not set up yet
	}
	if v.Static {
		return tp + uint64(v.TPOffset) + v.Offset, true, nil
	}
	dtv, err := word(mem, tp+uint64(v.DTVPointer))
	if err != nil {
		return 0, false, fmt.Errorf("dtv pointer of thread %#x: %w", tp, err)
	}
	if dtv == 0 {
		return 0, false, nil
	}
	gen, err := word(mem, dtv+uint64(v.DTVCounter))
	if err != nil {
		return 0, false, fmt.Errorf("dtv generation of thread %#x: %w", tp, err)
	}
	if gen < v.Generation {
		return 0, false, nil
	}
	val, err := word(mem, dtv+v.ModID*uint64(v.DTVEntrySize)+uint64(v.DTVVal))
	if err != nil {
		return 0, false, fmt.Errorf("dtv[%d] of thread %#x: %w", v.ModID, tp, err)
	}
	if val == 0 || val == TLSDTVUnallocated {
		return 0, false, nil
	}
	return val + v.Offset, true, nil
}

// word reads one little-endian 64-bit word.
func word(mem Memory, addr uint64) (uint64, error) {
	var b [8]byte
	if err := mem.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// DTV is where a thread's dynamic thread vector is, and how its slots are
// laid out, as the C library of a process keeps them.
type DTV struct {
	Libc      string // "glibc" or "musl"
	Pointer   int64  // offset from the thread pointer of the thread's dtv pointer
	EntrySize int64  // bytes of one slot
	Val       int64  // offset in a slot of the module's block address
}

// glibcDTV is glibc's DTV on x86_64 where its libthread_db descriptors
// cannot be read (a glibc before 2.34 whose libpthread is not loaded):
// tcbhead_t's dtv after its tcb pointer, and dtv_t a union of a counter
// and {void *val; bool is_static}. The descriptors, when present, say the
// same (TestLayout).
var glibcDTV = DTV{Libc: "glibc", Pointer: 8, EntrySize: 16, Val: 0}

// DTVOf returns the DTV layout of process pid's C library: musl's (see
// findMusl) or glibc's, from the descriptors it exports for libthread_db.
// Another C library is an error that says so.
func DTVOf(pid int, mem Memory) (DTV, error) { return (*Files)(nil).DTVOf(pid, mem) }

// DTVOf is the package's DTVOf, remembering what it reads of files (an
// agent attaching to many processes reads each C library's symbols once).
func (c *Files) DTVOf(pid int, mem Memory) (DTV, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return DTV{}, err
	}
	objs, err := loadObjects(pid, maps, "", c)
	if err != nil {
		return DTV{}, err
	}
	if libc := muslLibc(objs); libc != nil {
		if libc.machine != elf.EM_X86_64 {
			return DTV{}, fmt.Errorf("pid %d: %s is %v: only x86_64 is implemented", pid, libc.path, libc.machine)
		}
		return DTV{Libc: "musl", Pointer: muslDTVPointer, EntrySize: muslDTVEntry, Val: 0}, nil
	}
	for _, o := range objs {
		if _, ok := o.sym("_thread_db_pthread_dtvp"); !ok {
			continue
		}
		if o.machine != elf.EM_X86_64 {
			return DTV{}, fmt.Errorf("pid %d: %s is %v: only x86_64 is implemented", pid, o.path, o.machine)
		}
		l, err := readLayout(mem, o)
		if err != nil {
			return DTV{}, fmt.Errorf("pid %d: %w", pid, err)
		}
		return DTV{Libc: "glibc", Pointer: int64(l.dtvp), EntrySize: int64(l.dtvEntry), Val: int64(l.dtvVal)}, nil
	}
	for _, o := range objs {
		if _, ok := o.sym("_rtld_global"); ok && o.machine == elf.EM_X86_64 {
			return glibcDTV, nil // glibc's dynamic linker, without descriptors
		}
	}
	return DTV{}, fmt.Errorf("pid %d: its C library is neither glibc nor musl (no glibc dynamic linker, no musl libc is mapped): its thread-local storage cannot be read", pid)
}
