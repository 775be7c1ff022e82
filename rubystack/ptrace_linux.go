package rubystack

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

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

// maxFreezeThreads bounds the threads stopped at once.
const maxFreezeThreads = 1 << 14

// Freeze stops every thread of process pid (PTRACE_SEIZE + PTRACE_INTERRUPT)
// so its memory can be read consistently, and returns the function that lets
// them run again. The calling goroutine stays locked to its OS thread until
// then: ptrace requests must come from the tracing thread.
func Freeze(pid int) (thaw func(), err error) {
	runtime.LockOSThread()
	var stopped []int
	thaw = func() {
		for _, tid := range stopped {
			unix.PtraceDetach(tid)
		}
		runtime.UnlockOSThread()
	}
	defer func() {
		if err != nil {
			thaw()
		}
	}()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, ProcError(pid, err)
	}
	if len(tasks) > maxFreezeThreads {
		return nil, fmt.Errorf("pid %d: more than %d threads", pid, maxFreezeThreads)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.PtraceSeize(tid); err != nil {
			if err == unix.ESRCH {
				continue // the thread exited meanwhile
			}
			return nil, fmt.Errorf("pid %d: ptrace thread %d: %w; run as root or with CAP_SYS_PTRACE, or pass --nonblocking", pid, tid, err)
		}
		stopped = append(stopped, tid)
		if err := unix.PtraceInterrupt(tid); err != nil {
			return nil, fmt.Errorf("pid %d: interrupt thread %d: %w", pid, tid, err)
		}
	}
	for _, tid := range stopped {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil && err != unix.ECHILD {
			return nil, fmt.Errorf("pid %d: wait for thread %d: %w", pid, tid, err)
		}
	}
	return thaw, nil
}
