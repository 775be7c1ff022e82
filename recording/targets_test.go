package recording

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestAttachWhenReadyRace attaches to Rubies the instant they start, when
// libruby may be mapped before the dynamic linker has set up its TLS (module
// id 0, thread pointer 0): attaching must wait, never fail.
func TestAttachWhenReadyRace(t *testing.T) {
	r := testruby.Get(t, "debian-3.1")
	for i := 0; i < 30; i++ {
		cmd := exec.Command(r.Exe, "-e", "sleep 2")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tg, err := AttachWhenReady(ctx, cmd.Process.Pid, rubybuild.OpenOptions{}, nil)
		cancel()
		if err == nil {
			tg.Close()
		}
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			testskip.Privileged(t, fmt.Errorf("attempt %d: %w", i, err))
		}
	}
}

func TestRubyName(t *testing.T) {
	for name, want := range map[string]bool{"ruby": true, "ruby3.3": true, "ruby-3.3.6": true, "ruby_dev": true,
		"rubyperf": false, "rubyperf.test": false, "rubocop": false, "jruby": false, "": false} {
		if got := rubyName(name); got != want {
			t.Errorf("rubyName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestMentionsLibruby: the name is found wherever reads cut it, and not
// past maxMapsScan.
func TestMentionsLibruby(t *testing.T) {
	line := "7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libruby-3.3.so.3.3\n"
	other := strings.Repeat("7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/libc.so.6\n", 1000)
	for _, c := range []struct {
		name string
		r    io.Reader
		want bool
	}{
		{"whole", strings.NewReader(other + line), true},
		{"a byte a read", iotest.OneByteReader(strings.NewReader(other + line)), true},
		{"half a buffer a read", iotest.HalfReader(strings.NewReader(other + line)), true},
		{"none", strings.NewReader(other), false},
		{"past the bound", io.MultiReader(strings.NewReader(strings.Repeat("x", maxMapsScan)), strings.NewReader(line)), false},
	} {
		if got := mentionsLibruby(c.r); got != c.want {
			t.Errorf("%s: mentionsLibruby = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRubyScan: a rescan finds a running Ruby and not a sleep; it leaves
// out the pids it is told are known; and it remembers the sleep as no Ruby
// (by its start time) rather than read its maps again.
func TestRubyScan(t *testing.T) {
	r := testruby.Get(t, "debian-3.3")
	ruby := testruby.Start(t, r, "-e", `STDOUT.puts "ready"; STDOUT.flush; sleep`)
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	var scan rubyScan
	none := func(int) bool { return false }
	pids, err := scan.pids(time.Now(), none)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, ruby.Process.Pid) || slices.Contains(pids, sleep.Process.Pid) {
		t.Errorf("rescan found %v: want the Ruby %d, not the sleep %d", pids, ruby.Process.Pid, sleep.Process.Pid)
	}
	v, ok := scan.notRuby[sleep.Process.Pid]
	if !ok || v.start == "" {
		t.Fatalf("the sleep is not remembered as no Ruby: %+v", scan.notRuby[sleep.Process.Pid])
	}
	pids, _ = scan.pids(time.Now(), func(pid int) bool { return pid == ruby.Process.Pid })
	if slices.Contains(pids, ruby.Process.Pid) {
		t.Errorf("a known Ruby was found again: %v", pids)
	}
	if scan.notRuby[sleep.Process.Pid] != v {
		t.Errorf("the sleep was looked at again within %s: %+v, was %+v", notRubyRecheck, scan.notRuby[sleep.Process.Pid], v)
	}
	scan.pids(time.Now().Add(notRubyRecheck), none)
	if w := scan.notRuby[sleep.Process.Pid]; w == v {
		t.Errorf("the sleep was not looked at again after %s", notRubyRecheck)
	}
}
