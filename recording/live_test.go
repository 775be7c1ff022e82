package recording

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
)

// TestLiveForgetsExitedProcesses: a live recording (what the agent runs for
// days) merges each sample of every process it finds as it reads it, and
// forgets a process once it has exited: its target and its frames go.
func TestLiveForgetsExitedProcesses(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "debian-3.3")
	script := filepath.Join("..", "testdata", "ruby", "shares.rb")
	var (
		mu       sync.Mutex
		methods  = map[int]map[string]int{}
		progress []Progress
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Record(ctx, Options{All: true, Select: testruby.Child, Stacks: func(st merge.Stack, p *Process) {
			mu.Lock()
			defer mu.Unlock()
			if methods[p.PID] == nil {
				methods[p.PID] = map[string]int{}
			}
			for _, f := range st.Frames {
				if f.Kind == merge.KindRuby {
					methods[p.PID][f.Name]++
				}
			}
		}, Progress: func(p Progress) {
			mu.Lock()
			progress = append(progress, p)
			mu.Unlock()
		}})
		done <- err
	}()
	started := func() bool { mu.Lock(); defer mu.Unlock(); return len(progress) > 0 }
	for deadline := time.Now().Add(time.Minute); !started(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no progress within a minute")
		}
	}
	var pids []int
	for range 3 {
		cmd := testruby.Start(t, r, script, "1.5")
		pids = append(pids, cmd.Process.Pid)
	}
	time.Sleep(1500*time.Millisecond + liveGrace + 2*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, pid := range pids {
		if m := methods[pid]; m["Shares#heavy"] == 0 || m["Shares#light"] == 0 {
			t.Errorf("pid %d: Ruby frames %v, want Shares#heavy and Shares#light", pid, m)
		}
	}
	peak := 0
	for _, p := range progress {
		peak = max(peak, p.FrameKeys)
	}
	last := progress[len(progress)-1]
	t.Logf("frame keys: peak %d, at the end %d; processes kept at the end %d", peak, last.FrameKeys, last.Kept)
	if peak == 0 || last.FrameKeys != 0 || last.Kept != 0 || last.Targets != 0 || last.Attached != len(pids) {
		t.Errorf("after every process exited: %+v (peak frame keys %d); want nothing kept", last, peak)
	}
}
