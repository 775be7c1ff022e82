package rubystack

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestCheckGC: on every test Ruby, the GC counters at the layout's offsets
// (DWARF or a built-in table) agree with each other and with what the
// process itself reports, a major GC and a minor one later; and counters read
// 8 bytes off are refused, so stamps are never read from the wrong place.
func TestCheckGC(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd, lines := testruby.StartOutput(t, r, "-e", `GC.start; GC.start(full_mark: false)
				STDOUT.puts [GC.count, GC.stat(:major_gc_count)].join(" "); STDOUT.puts "ready"; STDOUT.flush; sleep`)
			if len(lines) != 1 {
				t.Fatalf("the Ruby printed %q before ready", lines)
			}
			want := lines[0]
			p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
			testruby.Privileged(t, permissionOnly(err))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			mem := &ProcessMemory{PID: cmd.Process.Pid}
			defer mem.Close()
			rd, err := NewReader(p, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !rd.Layout.Capabilities.GCStamps {
				t.Fatalf("layout %s has no GC stamps", rd.Layout.Source)
			}
			if err := rd.CheckGC(); err != nil {
				t.Fatal(err)
			}
			s, err := rd.GCStamp()
			if err != nil {
				t.Fatal(err)
			}
			var count, majors uint64
			if _, err := fmt.Sscan(want, &count, &majors); err != nil {
				t.Fatalf("the Ruby printed %q: %v", want, err)
			}
			if s.Count != count || s.Epoch == 0 || s.Epoch > s.Count || s.Marking || s.Compacting || !s.Idle {
				t.Errorf("stamp %+v; the process says %d GCs, %d major", s, count, majors)
			}

			off := *rd.Layout
			off.GC.MajorCount += 8
			bad := newReader(p.PID, mem, &off, 0, rd.vmPtr, 0)
			if err := bad.CheckGC(); err == nil || !errors.Is(err, ErrNoGCStamps) {
				t.Errorf("counters 8 bytes off: %v, want a refusal", err)
			}
		})
	}
}
