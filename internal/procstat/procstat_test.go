package procstat

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFieldsOfSelf(t *testing.T) {
	f, err := Fields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The process's own stat is its first thread's, which the Go runtime
	// may have parked while this test runs on another (a CI run saw S):
	// the running thread is this goroutine's, locked to it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if self, err := Fields(unix.Gettid()); err != nil {
		t.Error(err)
	} else if self[State] != "R" {
		t.Errorf("thread %d: state %q, want R (this test is running on it)", unix.Gettid(), self[State])
	}
	if f[PPID] != strconv.Itoa(os.Getppid()) {
		t.Errorf("ppid %q, want %d", f[PPID], os.Getppid())
	}
	if _, err := CPU(os.Getpid()); err != nil {
		t.Error(err)
	}
	if _, err := Fields(1 << 22); err == nil {
		t.Error("no error for a pid over pid_max")
	}
}
