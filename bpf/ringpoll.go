package bpf

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ringPoll waits for any of the perf rings through one epoll instance that
// is itself waited on by the Go runtime's poller: a goroutine parked there
// holds no thread in a system call, so the runtime's monitor thread can
// sleep instead of checking on that call hundreds of times a second.
type ringPoll struct {
	fd     int
	file   *os.File        // fd, registered with the runtime's poller
	conn   syscall.RawConn // nil when the runtime could not poll it: wait blocks instead
	events []unix.EpollEvent
}

func newRingPoll() (*ringPoll, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	p := &ringPoll{fd: fd, events: make([]unix.EpollEvent, 64)}
	if unix.SetNonblock(fd, true) == nil {
		p.file = os.NewFile(uintptr(fd), "perf rings")
		if p.file.SetReadDeadline(time.Time{}) == nil { // pollable
			p.conn, _ = p.file.SyscallConn()
		}
	}
	return p, nil
}

// add watches a ring's file descriptor for readability.
func (p *ringPoll) add(fd int) error {
	return unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
}

// wait returns when a ring is readable or after d.
func (p *ringPoll) wait(d time.Duration) error {
	if p.conn == nil {
		_, err := unix.EpollWait(p.fd, p.events, int(d/time.Millisecond))
		if err == unix.EINTR {
			err = nil
		}
		return err
	}
	if err := p.file.SetReadDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	var werr error
	err := p.conn.Read(func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), p.events, 0)
		if err == unix.EINTR || err == nil && n == 0 {
			return false // nothing yet: park until the poller says ready
		}
		werr = err
		return true
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	if err != nil {
		return err
	}
	return werr
}

func (p *ringPoll) close() {
	if p.file != nil {
		p.file.Close()
		return
	}
	unix.Close(p.fd)
}
