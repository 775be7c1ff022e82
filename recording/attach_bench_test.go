package recording

import (
	"context"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/threadlocal"
)

// BenchmarkAttach measures attaching to a running Ruby as a recorder that
// has seen no process of its build (first: the peer) and as one that has
// attached to another process of it before (seen: what `record -a` and the
// agent pay for each new process of a fleet of one Ruby). Go test -bench
// Attach -benchtime 50x ./recording.
func BenchmarkAttach(b *testing.B) {
	for _, flavor := range []string{"debian-3.3", "source-3.3-static"} {
		r := testruby.Get(b, flavor)
		cmd, _ := testruby.StartOutput(b, r, "-e", `STDOUT.puts "ready"; STDOUT.flush; sleep`)
		pid := cmd.Process.Pid
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t, err := AttachWhenReady(ctx, pid, rubybuild.OpenOptions{}, nil)
		cancel()
		testskip.Privileged(b, err)
		t.Close()
		for _, seen := range []bool{false, true} {
			name := flavor + "/first"
			if seen {
				name = flavor + "/seen"
			}
			b.Run(name, func(b *testing.B) {
				builds, files := &rubybuild.Cache{}, &threadlocal.Files{}
				if seen { // another process of the build, attached before
					t, err := Attach(pid, rubybuild.OpenOptions{Cache: builds}, files)
					if err != nil {
						b.Fatal(err)
					}
					t.Close()
				}
				for b.Loop() {
					if !seen {
						builds, files = &rubybuild.Cache{}, &threadlocal.Files{}
					}
					t, err := Attach(pid, rubybuild.OpenOptions{Cache: builds}, files)
					if err != nil {
						b.Fatal(err)
					}
					t.Close()
				}
			})
		}
	}
}
