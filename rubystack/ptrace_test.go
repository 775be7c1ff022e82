package rubystack

import (
	"bufio"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestPtraceKeepsSignals: a signal that reaches a thread while rubyperf
// holds it (reading its thread pointer, or freezing the process) is
// delivered when rubyperf lets go, not swallowed: a target that counts its
// SIGUSR1s sees every one sent while it is stopped and started again.
func TestPtraceKeepsSignals(t *testing.T) {
	perl := testskip.Command(t, "perl", "perl")
	for _, c := range []struct {
		name string
		hold func(pid int) error
	}{
		{"ThreadPointer", func(pid int) error { _, err := ThreadPointer(pid, pid); return err }},
		{"Freeze", func(pid int) error {
			thaw, err := Freeze(pid)
			if err == nil {
				thaw()
			}
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// One line a signal; one-threaded, so every signal is the
			// main thread's.
			cmd := exec.Command(perl, "-e", `$| = 1; my $n = 0; $SIG{USR1} = sub { $n++; print "$n\n" }; print "ready\n"; select(undef, undef, undef, 0.01) while 1`)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			lines := make(chan string)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			if l := <-lines; l != "ready" {
				t.Fatalf("perl said %q", l)
			}
			pid := cmd.Process.Pid
			const rounds = 300
			for i := 1; i <= rounds; i++ {
				go unix.Kill(pid, unix.SIGUSR1)
				err := c.hold(pid)
				testskip.Privileged(t, err)
				if err != nil {
					t.Fatal(err)
				}
				select {
				case l := <-lines:
					if want := strconv.Itoa(i); l != want {
						t.Fatalf("round %d: the target counted %q", i, l)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d of %d: the SIGUSR1 sent while rubyperf held the target never reached it", i, rounds)
				}
			}
		})
	}
}
