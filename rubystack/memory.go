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

// maxIovecs is how many pieces one process_vm_readv reads (IOV_MAX).
const maxIovecs = 1024

// ReadPieces fills each p[i] from addrs[i], many in one system call, and
// says in ok[i] which were read whole: one piece that is not mapped fails
// alone. All three slices have one length.
func (m *ProcessMemory) ReadPieces(p [][]byte, addrs []uint64, ok []bool) {
	local := make([]unix.Iovec, 0, min(len(p), maxIovecs))
	remote := make([]unix.RemoteIovec, 0, min(len(p), maxIovecs))
	for i := 0; i < len(p); {
		local, remote = local[:0], remote[:0]
		for j := i; j < len(p) && len(local) < maxIovecs; j++ {
			if len(p[j]) == 0 || len(p[j]) > maxRead {
				break
			}
			v := unix.Iovec{Base: &p[j][0]}
			v.SetLen(len(p[j]))
			local = append(local, v)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(addrs[j]), Len: len(p[j])})
		}
		if len(local) == 0 { // an empty or oversized piece: read alone
			ok[i] = m.ReadAt(p[i], addrs[i]) == nil
			i++
			continue
		}
		n, err := unix.ProcessVMReadv(m.PID, local, remote, 0)
		if err != nil && err != unix.EFAULT || n < 0 {
			for j := i; j < i+len(local); j++ { // refused or gone: one at a time says which
				ok[j] = m.ReadAt(p[j], addrs[j]) == nil
			}
			i += len(local)
			continue
		}
		// The kernel stops at the first piece it cannot read: those
		// before it are whole, it failed, the rest are read again.
		j := i
		for ; j < i+len(local) && n >= len(p[j]); j++ {
			ok[j] = true
			n -= len(p[j])
		}
		if j < i+len(local) {
			ok[j] = false
			j++
		}
		i = j
	}
}

// PieceReader is a Memory that reads many pieces in one call
// (ProcessMemory).
type PieceReader interface {
	ReadPieces(p [][]byte, addrs []uint64, ok []bool)
}

// readPieces fills each p[i] from addrs[i], in one call where mem can
// (PieceReader), else one by one, and says in ok which were read whole.
func readPieces(mem Memory, p [][]byte, addrs []uint64, ok []bool) {
	if pr, can := mem.(PieceReader); can {
		pr.ReadPieces(p, addrs, ok)
		return
	}
	for i := range p {
		ok[i] = mem.ReadAt(p[i], addrs[i]) == nil
	}
}
