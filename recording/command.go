package recording

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxCommandTree bounds how many processes of a command's tree are ended.
const maxCommandTree = 4096

// abandonCommand ends a command started for a recording that then failed
// to start, with every process it started, and reaps it (done is its
// wait's result): nothing started by record outlives a failed start.
func abandonCommand(pid int, done <-chan error) {
	killTree(pid)
	<-done
}

// killTree stops pid and, as they are found, its descendants (a stopped
// process forks no more), then kills them all. A fork under way while its
// parent is stopped can escape one round; a few rounds catch it.
func killTree(pid int) {
	for range 3 {
		tree := []int{pid}
		unix.Kill(pid, unix.SIGSTOP)
		for i := 0; i < len(tree) && len(tree) < maxCommandTree; i++ {
			for _, c := range children(tree[i]) {
				unix.Kill(c, unix.SIGSTOP)
				tree = append(tree, c)
			}
		}
		for _, p := range tree {
			unix.Kill(p, unix.SIGKILL)
		}
		if len(tree) == 1 {
			return
		}
	}
}

// children lists the children of every thread of pid
// (/proc/PID/task/TID/children), bounded.
func children(pid int) []int {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil
	}
	var out []int
	for i, t := range tasks {
		if i == maxCommandTree {
			break
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && c > 1 && len(out) < maxCommandTree {
				out = append(out, c)
			}
		}
	}
	return out
}

// commandGrace is how long a started command has to exit once told to.
const commandGrace = 5 * time.Second

// endCommand waits for the command Record started, after sampling
// stopped. Interrupted (Ctrl-C), the command got the signal too, from its
// terminal (same process group): it has commandGrace to finish. When the
// recording ended otherwise (its duration), the command ends with it, as
// timeout(1) would end it: a user who wants a program to outlive its
// recording records it with -p. A command that is already exiting (the
// kernel's exit record ended the recording, and comes before the command
// can be reaped) is waited for, never signalled.
func (s *session) endCommand(ctx context.Context, cmd *exec.Cmd, done <-chan error) string {
	select {
	case <-done:
		return "" // it exited by itself (and ended the recording)
	default:
	}
	s.mu.Lock()
	exiting := s.commandExiting
	s.mu.Unlock()
	if exiting || exited(cmd.Process.Pid) {
		select {
		case <-done:
			return ""
		case <-time.After(commandGrace):
			// An exit that takes this long is stuck in the kernel
			// (a core dump to a slow pipe): SIGKILL is all that is left.
		}
	}
	how := ""
	if ctx.Err() == nil && cmd.Process.Signal(syscall.SIGTERM) == nil {
		how = CommandStopped // (an error: it was reaped meanwhile, by itself)
	}
	select {
	case <-done:
		return how
	case <-time.After(commandGrace):
		cmd.Process.Kill()
		<-done
		return CommandKilled
	}
}

// exited tells whether child pid has ended and waits to be reaped,
// without reaping it.
func exited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}

// CommandStatus describes how a started command ended, as a shell would:
// "exited with status N", or "killed by SIGNAME" (and "(core dumped)").
func CommandStatus(ps *os.ProcessState) string {
	if ps == nil {
		return "not waited for"
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		s := "killed by " + unix.SignalName(ws.Signal())
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	default:
		return fmt.Sprintf("exited with status %d", ps.ExitCode())
	}
}

// CommandExitCode is the status a shell gives a command that ended as ps
// says: its exit code, or 128 plus the signal that killed it.
func CommandExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// waitExit returns once process pid (a child) has exited, without reaping
// it or taking any ptrace stop of it: its pidfd becomes readable then.
// Without pidfds (before Linux 5.3) it looks at the process's state.
func waitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		for alive(pid) {
			time.Sleep(50 * time.Millisecond)
		}
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}
