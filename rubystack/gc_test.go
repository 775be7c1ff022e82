package rubystack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestCheckGC: on every test Ruby, the GC counters at the layout's offsets
// (DWARF or a built-in table) agree with each other and with what the
// process itself reports, a major GC and a minor one later (and the stamp's
// epoch is known with its major GC count); and counters read
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
			testskip.Privileged(t, err)
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
			// The stamp's epoch (the GC.start) with the major GCs by then.
			if m, ok := rd.MajorsAt(s.Epoch); !ok || m != majors {
				t.Errorf("major GCs by epoch %d: %d (known %v); the process says %d", s.Epoch, m, ok, majors)
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

// startingGC is a target's memory seen while its GC sits between counting
// itself and counting its kind (gc_start's count++ before gc_marks_start's
// major_gc_count++), as a starved target can for milliseconds: until until,
// the count word at addr reads one more than it holds.
type startingGC struct {
	Memory
	addr  uint64
	until time.Time
}

func (m *startingGC) ReadAt(p []byte, addr uint64) error {
	if err := m.Memory.ReadAt(p, addr); err != nil {
		return err
	}
	if time.Now().Before(m.until) && addr <= m.addr && m.addr+8 <= addr+uint64(len(p)) {
		w := p[m.addr-addr:]
		binary.LittleEndian.PutUint64(w, binary.LittleEndian.Uint64(w)+1)
	}
	return nil
}

// TestCheckGCWaitsOutAStartingGC: counters caught inside a GC's start are
// read again until the GC moves on, for longer than a few quick reads (CI
// once caught a 3.3 target there for every one of five 1 ms tries), and a
// target that never leaves that state is refused within the budget.
func TestCheckGCWaitsOutAStartingGC(t *testing.T) {
	r := testruby.Get(t, "source-3.3-static")
	cmd, _ := testruby.StartOutput(t, r, "-e", `GC.start; GC.start(full_mark: false); STDOUT.puts "ready"; STDOUT.flush; sleep`)
	pid := cmd.Process.Pid
	rd := liveReader(t, pid)
	mem := &ProcessMemory{PID: pid}
	defer mem.Close()
	os, err := rd.Objspace()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		window time.Duration
		ok     bool
	}{
		{"leaves after 40ms", 40 * time.Millisecond, true},
		{"never leaves", time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &startingGC{Memory: mem, addr: os + uint64(rd.Layout.GC.Count), until: time.Now().Add(c.window)}
			in := newReader(pid, m, rd.Layout, 0, rd.vmPtr, 0)
			start := time.Now()
			err := in.CheckGC()
			took := time.Since(start)
			switch {
			case c.ok && err != nil:
				t.Fatalf("after %v: %v", took, err)
			case !c.ok && !errors.Is(err, ErrNoGCStamps):
				t.Fatalf("after %v: %v, want a refusal", took, err)
			case !c.ok && (took < gcCheckBudget || took > 4*gcCheckBudget):
				t.Fatalf("refused after %v; the budget is %v", took, gcCheckBudget)
			}
			t.Logf("%v after %v", err, took)
		})
	}
}
