package rubystack

import (
	"fmt"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestAllocatedObjects: on every test Ruby, the allocation counters at the
// layout's offsets (DWARF or a built-in table) add up to what the process
// itself reports as GC.stat(:total_allocated_objects): at least what it
// printed, and not much more (it allocates a little after printing).
func TestAllocatedObjects(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd, lines := testruby.StartOutput(t, r, "-e", `a = Array.new(100_000) { Object.new }
				STDOUT.puts GC.stat(:total_allocated_objects); STDOUT.puts "ready"; STDOUT.flush; sleep`)
			if len(lines) != 1 {
				t.Fatalf("the Ruby printed %q before ready", lines)
			}
			var want uint64
			if _, err := fmt.Sscan(lines[0], &want); err != nil {
				t.Fatalf("the Ruby printed %q: %v", lines[0], err)
			}
			p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
			testskip.Privileged(t, err)
			defer p.Close()
			mem := &ProcessMemory{PID: cmd.Process.Pid}
			defer mem.Close()
			rd, err := NewReader(p, mem)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rd.AllocatedObjects()
			if err != nil {
				t.Fatalf("layout %s: %v", rd.Layout.Source, err)
			}
			if got < want || got > want+1000 {
				t.Errorf("layout %s (allocated %+v): %d objects allocated; the process said %d", rd.Layout.Source,
					rd.Layout.Allocated, got, want)
			}
		})
	}
}
