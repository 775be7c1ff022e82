package recording

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
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
