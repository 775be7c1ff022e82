package rubystack

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// maxRead bounds one read of target memory.
const maxRead = 16 << 20

// Memory reads another address space: a live process, or a saved snapshot in tests.
type Memory interface {
	// ReadAt fills p from address addr, or fails; a short read is an error.
	ReadAt(p []byte, addr uint64) error
}

// ProcessMemory reads a live process with process_vm_readv, falling back to
// /proc/PID/mem where that syscall is refused.
type ProcessMemory struct {
	PID int
	mem *os.File
}

func (m *ProcessMemory) ReadAt(p []byte, addr uint64) error {
	if len(p) > maxRead {
		return fmt.Errorf("pid %d: read of %d bytes at %#x refused (limit %d)", m.PID, len(p), addr, maxRead)
	}
	if len(p) == 0 {
		return nil
	}
	local := []unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
	n, err := unix.ProcessVMReadv(m.PID, local, remote, 0)
	if err == unix.ENOSYS || err == unix.EPERM {
		return m.readProcMem(p, addr)
	}
	switch {
	case err == unix.ESRCH:
		return fmt.Errorf("pid %d: the process exited", m.PID)
	case err == unix.EFAULT || err == nil && n != len(p):
		// A pointer that led nowhere: in a running process, a torn read.
		return fmt.Errorf("%w: pid %d: %d bytes at %#x are not mapped", errTorn, m.PID, len(p), addr)
	case err != nil:
		return fmt.Errorf("pid %d: read %#x: %w", m.PID, addr, err)
	}
	return nil
}

func (m *ProcessMemory) readProcMem(p []byte, addr uint64) error {
	if m.mem == nil {
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", m.PID))
		if err != nil {
			return ProcError(m.PID, err)
		}
		m.mem = f
	}
	if addr > 1<<63 {
		return fmt.Errorf("pid %d: address %#x out of range", m.PID, addr)
	}
	if _, err := m.mem.ReadAt(p, int64(addr)); err != nil {
		return fmt.Errorf("pid %d: read %#x: %w", m.PID, addr, err)
	}
	return nil
}

// Close releases /proc/PID/mem if it was opened.
func (m *ProcessMemory) Close() error {
	if m.mem != nil {
		return m.mem.Close()
	}
	return nil
}

// ReadWord reads one little-endian 64-bit word.
func ReadWord(m Memory, addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
