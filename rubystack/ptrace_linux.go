package rubystack

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ThreadPointer returns the thread pointer (x86_64 fs_base) of thread tid of
// process pid. procfs does not show it, so the thread is stopped for an
// instant with PTRACE_SEIZE + PTRACE_INTERRUPT and its registers read. The
// value never changes for the life of a thread, so callers cache it.
func ThreadPointer(pid, tid int) (uint64, error) {
	runtime.LockOSThread() // ptrace requests must come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := seize(pid, tid, "run as root or with CAP_SYS_PTRACE"); err != nil {
		return 0, err
	}
	var pending unix.Signal
	defer func() { detach(tid, pending) }()
	if err := unix.PtraceInterrupt(tid); err != nil {
		return 0, fmt.Errorf("pid %d: interrupt thread %d: %w", pid, tid, err)
	}
	pending, err := waitStop(tid)
	if err != nil {
		return 0, fmt.Errorf("pid %d: wait for thread %d: %w", pid, tid, err)
	}
	return threadPointerFromRegs(tid)
}

// waitStop waits for the ptrace-stop of thread tid that PTRACE_INTERRUPT
// asked for, and returns the signal the thread must be given when it is let
// go: a signal that reached the thread first stops it on its way in
// (signal-delivery-stop), taken off its queue, and is lost unless detach
// passes it on. Zero for the interrupt's own stop or a group-stop (status
// PTRACE_EVENT_STOP << 16), or a thread that exited.
func waitStop(tid int) (unix.Signal, error) {
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		return 0, err
	}
	if !ws.Stopped() || (uint32(ws)>>16)&0xff == unix.PTRACE_EVENT_STOP {
		return 0, nil
	}
	return ws.StopSignal(), nil
}

// detach lets thread tid go (PTRACE_DETACH), delivering sig, the signal its
// stop took off its queue, if any.
func detach(tid int, sig unix.Signal) {
	unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(sig), 0, 0)
}

// tracedWait is how long seize waits for another tracer to let a thread go:
// another rubyperf attaching to the same process holds each thread for
// milliseconds.
const tracedWait = 2 * time.Second

// seize attaches to thread tid of pid (PTRACE_SEIZE). A thread can have one
// tracer: while another holds it (a second recorder attaching at the same
// moment), seize waits up to tracedWait; a tracer that stays (a debugger)
// is named in the error. Other refusals get hint, about privileges.
func seize(pid, tid int, hint string) error {
	deadline := time.Now().Add(tracedWait)
	retried := false
	for {
		err := unix.PtraceSeize(tid)
		if err == nil {
			return nil
		}
		tracer := tracerOf(tid)
		switch {
		case err == unix.EPERM && tracer == 0 && !retried:
			retried = true // a tracer may have let go between the two looks
			continue
		case err != unix.EPERM || tracer <= 0:
			return fmt.Errorf("pid %d: ptrace thread %d: %w; %s", pid, tid, err, hint)
		case time.Now().After(deadline):
			return fmt.Errorf("pid %d: thread %d is being traced by pid %d (%s): detach that tracer (a debugger?) and try again",
				pid, tid, tracer, commOf(tracer))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// commOf is the command name of process pid, "?" when unknown.
func commOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)) // at most 16 bytes
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// maxStatus bounds what is read of /proc/TID/status.
const maxStatus = 16 << 10

// statusField is the number in field name ("TracerPid") of
// /proc/TID/status, -1 when unknown.
func statusField(tid int, name string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return -1
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxStatus))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// tracerOf is the process (not the thread: TracerPid is the tracing
// thread's id) tracing thread tid, 0 when none, -1 when unknown.
func tracerOf(tid int) int {
	t := statusField(tid, "TracerPid")
	if t <= 0 {
		return t
	}
	if pid := statusField(t, "Tgid"); pid > 0 {
		return pid
	}
	return t
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
	pending := map[int]unix.Signal{} // signals the stops took, by thread
	thaw = func() {
		for _, tid := range stopped {
			detach(tid, pending[tid])
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
		if err := seize(pid, tid, "run as root or with CAP_SYS_PTRACE, or pass --nonblocking"); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue // the thread exited meanwhile
			}
			return nil, err
		}
		stopped = append(stopped, tid)
		if err := unix.PtraceInterrupt(tid); err != nil {
			return nil, fmt.Errorf("pid %d: interrupt thread %d: %w", pid, tid, err)
		}
	}
	for _, tid := range stopped {
		sig, err := waitStop(tid)
		if err != nil && err != unix.ECHILD {
			return nil, fmt.Errorf("pid %d: wait for thread %d: %w", pid, tid, err)
		}
		if sig != 0 {
			pending[tid] = sig
		}
	}
	return thaw, nil
}
