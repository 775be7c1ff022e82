package rubystack

import (
	"errors"
	"fmt"

	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/threadlocal"
)

// maxStaticTLS bounds the bytes between a thread pointer and a static TLS
// block.
const maxStaticTLS = 1 << 30

// ErrTLSNotReady says a process has mapped libruby but the dynamic linker
// has not set up its TLS yet (a process that just started): try again.
var ErrTLSNotReady = errors.New("libruby's thread-local storage is not set up yet")

// CurrentECOffset returns the offset from a thread's thread pointer to its
// ruby_current_ec slot in this process: TP + offset holds the thread's EC.
//
// For an executable (static ruby) the offset is fixed at link time. For a
// libruby it depends on where the dynamic linker put the module's TLS block:
// that is read once through the DTV of one thread, laid out as the process's
// C library keeps it (threadlocal.DTVOf: glibc's or musl's), and holds for
// every thread, because a library loaded at start-up gets static TLS at one
// offset in both.
// files, when not nil, serves what was read of the C library's files
// before, and keeps what is read now.
func (p *Process) CurrentECOffset(mem Memory, ec rubybuild.Anchor, tp uint64, files *threadlocal.Files) (int64, error) {
	if !ec.Found {
		return 0, fmt.Errorf("pid %d: ruby_current_ec not found: %s", p.PID, ec.Why)
	}
	if ec.HasTPOffset {
		return ec.TPOffset, nil
	}
	if ec.TLSModuleGOT == 0 {
		return 0, errors.New("ruby_current_ec: no TLS module id relocation to read the module's TLS block")
	}
	if p.Binary.Arch != "x86_64" {
		return 0, fmt.Errorf("pid %d: TLS of %s libruby is not implemented", p.PID, p.Binary.Arch)
	}
	modid, err := ReadWord(mem, p.Bias+ec.TLSModuleGOT)
	if err != nil {
		return 0, fmt.Errorf("TLS module id: %w", err)
	}
	const maxModules = 1 << 16 // dlopen'ed modules in one process
	if modid == 0 {
		return 0, fmt.Errorf("pid %d: %w (TLS module id 0)", p.PID, ErrTLSNotReady)
	}
	if modid > maxModules {
		return 0, fmt.Errorf("pid %d: TLS module id %d is not plausible", p.PID, modid)
	}
	// In a process that just started, the thread pointer or the DTV may not
	// be set up yet.
	if tp == 0 {
		return 0, fmt.Errorf("pid %d: %w (thread pointer 0)", p.PID, ErrTLSNotReady)
	}
	layout, err := files.DTVOf(p.PID, mem)
	if err != nil {
		return 0, err // it names the pid
	}
	dtv, err := ReadWord(mem, tp+uint64(layout.Pointer))
	if err != nil || dtv == 0 {
		return 0, fmt.Errorf("pid %d: %w (%s DTV: %v)", p.PID, ErrTLSNotReady, layout.Libc, err)
	}
	block, err := ReadWord(mem, dtv+modid*uint64(layout.EntrySize)+uint64(layout.Val))
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w (%s TLS block of module %d: %v)", p.PID, ErrTLSNotReady, layout.Libc, modid, err)
	}
	if block == 0 || block == ^uint64(0) {
		return 0, fmt.Errorf("pid %d: %w (no TLS block for module %d in this thread's %s DTV; a dlopen'ed Ruby?)", p.PID, ErrTLSNotReady, modid, layout.Libc)
	}
	// Static TLS lies below the thread pointer (x86_64, variant II).
	if block >= tp || tp-block > maxStaticTLS {
		return 0, fmt.Errorf("pid %d: libruby's TLS block %#x (module %d, %s DTV) is not in static TLS below the thread pointer %#x", p.PID, block, modid, layout.Libc, tp)
	}
	return int64(block-tp) + ec.TLSOffset, nil
}
