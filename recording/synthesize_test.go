package recording

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/rubyperf/rubyperf/rubystack"
)

// TestSynthesizeExitedProcess: a process that exits between being attached
// and being described is reported as gone, so -a can pass over it instead of
// failing the whole recording.
func TestSynthesizeExitedProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid // reaped: /proc/PID is gone
	err := (&session{}).synthesize(pid)
	if !errors.Is(err, rubystack.ErrNoProcess) {
		t.Fatalf("synthesize(exited pid %d) = %v, want an error matching ErrNoProcess", pid, err)
	}
}
