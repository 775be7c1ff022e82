package rubystack

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// ThreadPointer returns the thread pointer (x86_64 fs_base) of thread tid of
// process pid. procfs does not show it, so the thread is stopped for an
// instant with PTRACE_SEIZE + PTRACE_INTERRUPT and its registers read. The
// value never changes for the life of a thread, so callers cache it.
func ThreadPointer(pid, tid int) (uint64, error) {
	runtime.LockOSThread() // ptrace requests must come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		return 0, fmt.Errorf("pid %d: ptrace thread %d: %w; run as root or with CAP_SYS_PTRACE", pid, tid, err)
	}
	defer unix.PtraceDetach(tid)
	if err := unix.PtraceInterrupt(tid); err != nil {
		return 0, fmt.Errorf("pid %d: interrupt thread %d: %w", pid, tid, err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		return 0, fmt.Errorf("pid %d: wait for thread %d: %w", pid, tid, err)
	}
	return threadPointerFromRegs(tid)
}
