package procstat

import (
	"os"
	"strconv"
	"testing"
)

func TestFieldsOfSelf(t *testing.T) {
	f, err := Fields(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if f[State] != "R" {
		t.Errorf("state %q, want R (this test is running)", f[State])
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
