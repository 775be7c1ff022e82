package rubystack

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// tornMemory reads through inner, except that the word at addr reads as 0
// until the time until: a thread preempted while it pushed a frame, seen
// from outside, as long as it is not scheduled.
type tornMemory struct {
	inner Memory
	addr  uint64
	until time.Time
}

func (m *tornMemory) ReadAt(p []byte, addr uint64) error {
	if err := m.inner.ReadAt(p, addr); err != nil {
		return err
	}
	if time.Now().Before(m.until) && m.addr >= addr && m.addr+8 <= addr+uint64(len(p)) {
		clear(p[m.addr-addr:][:8])
	}
	return nil
}

// TestCheckLayoutWaitsOutTornFrame: a real Ruby asleep, whose newest
// frame's env flags read as 0 (no frame magic) for 300 ms, as those of a
// thread preempted mid-push on a busy machine do, while ec->cfp stays put:
// the check of its table layout waits for a clean read and passes. Read as
// 0 for good, the layout is refused, naming the frame, within newestTornWait
// and a second.
func TestCheckLayoutWaitsOutTornFrame(t *testing.T) {
	r := testruby.Get(t, "debian-3.3-trixie-security")
	cmd := testruby.Start(t, r, "-e", `STDOUT.puts "ready"; STDOUT.flush; sleep`)
	p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	mem := &ProcessMemory{PID: p.PID}
	defer mem.Close()
	rd, err := NewReader(p, mem)
	if err != nil {
		testskip.Privileged(t, err)
	}
	if rd.Layout.FromDWARF() {
		t.Fatalf("the layout of %s came from DWARF: nothing is checked", r.VM)
	}
	threads, err := rd.Threads()
	if err != nil || len(threads) != 1 {
		t.Fatalf("threads: %v, %v", threads, err)
	}
	cfp, err := rd.direct.word(threads[0].EC + uint64(rd.Layout.ExecutionContext.CFP))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := rd.direct.word(cfp + uint64(rd.Layout.ControlFrame.EP))
	if err != nil {
		t.Fatal(err)
	}

	const torn = 300 * time.Millisecond
	start := time.Now()
	if _, err := NewReader(p, &tornMemory{inner: mem, addr: ep, until: start.Add(torn)}); err != nil {
		t.Fatalf("a newest frame torn for %v: %v", torn, err)
	}
	if took := time.Since(start); took < torn {
		t.Fatalf("the check passed in %v, before the torn frame read clean (%v): the tear was never seen", took, torn)
	}

	start = time.Now()
	_, err = NewReader(p, &tornMemory{inner: mem, addr: ep, until: start.Add(time.Hour)})
	if !errors.Is(err, ErrLayoutMismatch) || !strings.Contains(err.Error(), "frame magic 0x0") {
		t.Fatalf("a newest frame torn for good: %v, want the layout refused for its frame magic", err)
	}
	if took := time.Since(start); took > newestTornWait+time.Second {
		t.Errorf("refusing took %v", took)
	}
}
