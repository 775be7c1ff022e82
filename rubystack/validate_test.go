package rubystack

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestCheckLayoutBusyThread: the layout check of a table layout passes,
// every time, on a thread that pushes and pops frames as fast as Ruby can:
// a deep recursion tears its newest frames under most reads, and a loop two
// frames deep that calls C methods pushes and pops its newest frame all the
// time (the read of that frame tears with no older frames above it). Each
// Debian Ruby is stripped, so its layout is a table's and is checked live.
func TestCheckLayoutBusyThread(t *testing.T) {
	script, _ := filepath.Abs("../testdata/ruby/workload.rb")
	shapes := map[string][]string{
		"recursion":   {script, "60"},
		"cmethodloop": {"-e", `STDOUT.puts "ready"; STDOUT.flush; t = Time.now; nil while Time.now - t < 60`},
	}
	for _, flavor := range []string{"debian-3.1-bookworm", "debian-3.1-bookworm-security", "debian-3.3-trixie-security",
		"debian-3.4-experimental"} {
		for shape, args := range shapes {
			t.Run(flavor+"/"+shape, func(t *testing.T) {
				r := testruby.Get(t, flavor)
				cmd := testruby.Start(t, r, args...)
				p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				mem := &ProcessMemory{PID: p.PID}
				defer mem.Close()
				const tries = 40
				for i := 0; i < tries; i++ {
					rd, err := NewReader(p, mem)
					if err != nil {
						testskip.Privileged(t, fmt.Errorf("check %d of %d: %w", i+1, tries, err))
					}
					if rd.Layout.FromDWARF() {
						t.Fatalf("the layout of %s came from DWARF: nothing was checked", r.VM)
					}
				}
			})
		}
	}
}
