package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/recording"
)

// loadServer keeps clients connections busy on addr until ctx ends: each
// sends a line and waits for the answer, again and again. It returns how
// many requests were answered.
func loadServer(ctx context.Context, addr string, clients int) func() int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			rd := bufio.NewReader(c)
			for ctx.Err() == nil {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write([]byte("x\n")); err != nil {
					return
				}
				if _, err := rd.ReadString('\n'); err != nil {
					return
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	return func() int { wg.Wait(); return n }
}

// serverStates is how the worker threads of testdata/ruby/server.rb spent
// their time, recorded with --wall under load: the shares of waiting for
// the GVL, of blocked, and of off the CPU without telling which.
type serverStates struct{ gvl, blocked, offCPU, running float64 }

// TestStateServer: a threaded server (4 workers) under CPU-bound load from
// 8 clients: its workers wait for the GVL most of the time, and a stripped
// Ruby, whose layout comes from a built-in table, says so as its build with
// DWARF does (within 5 points; for Debian's, the source build of the same
// line), with no more than 1% of the time off the CPU unexplained.
func TestStateServer(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	script, _ := filepath.Abs("../../testdata/ruby/server.rb")
	got := map[string]serverStates{}
	rubies := map[string]testruby.Ruby{}
	for _, r := range testruby.All(t) {
		rubies[r.Name] = r
		t.Run(r.Name, func(t *testing.T) {
			st := measureServer(t, r, script)
			got[r.Name] = st
			if st.offCPU > 0.01 {
				t.Errorf("%.1f%% of the workers' time off the CPU, neither blocked nor waiting for the GVL", 100*st.offCPU)
			}
			// Four workers, eight clients, work only in Ruby: one worker
			// runs at a time, the others mostly wait for it.
			if st.gvl < 0.4 {
				t.Errorf("the workers waited for the GVL %.1f%% of their time, want most of it", 100*st.gvl)
			}
		})
	}
	// A Debian Ruby's build with DWARF is the one built here from the
	// same line's sources (the same 3.1.2 for bookworm's).
	twin := func(name string) string {
		for _, p := range []struct{ prefix, twin string }{{"debian-3.1", "source-3.1-shared"},
			{"debian-3.3", "source-3.3-static"}, {"debian-3.4", "source-3.4-shared"}} {
			if strings.HasPrefix(name, p.prefix) {
				return p.twin
			}
		}
		return strings.TrimSuffix(name, "-stripped")
	}
	for name, st := range got {
		full, ok := got[twin(name)]
		if !ok || twin(name) == name {
			continue
		}
		if d := math.Abs(st.gvl - full.gvl); d > 0.05 {
			// Measured seconds apart, on a machine whose other load
			// (CI's other packages) moves the share by itself: measured
			// again side by side, both under load in one recording, twice,
			// the two compared under the same load.
			t.Logf("%s: waiting for the GVL %.1f%%, its build with DWARF %.1f%%: measured again side by side", name, 100*st.gvl, 100*full.gvl)
			var a, b float64
			for range 2 {
				both := measureServers(t, script, rubies[name], rubies[twin(name)])
				a, b = a+both[0].gvl/2, b+both[1].gvl/2
			}
			st.gvl, full.gvl = a, b
		}
		if d := math.Abs(st.gvl - full.gvl); d > 0.05 {
			t.Errorf("%s: waiting for the GVL %.1f%%, its build with DWARF %.1f%%", name, 100*st.gvl, 100*full.gvl)
		} else {
			t.Logf("%s: waiting for the GVL %.1f%%, its build with DWARF %.1f%% (%s)", name, 100*st.gvl, 100*full.gvl,
				fmt.Sprintf("%+.1f pp", 100*(st.gvl-full.gvl)))
		}
	}
}

// measureServer runs testdata/ruby/server.rb (4 workers) on r under load
// from 8 clients and records it for 3 s with --wall: how its workers
// spent their time.
func measureServer(t *testing.T, r testruby.Ruby, script string) serverStates {
	t.Helper()
	return measureServers(t, script, r)[0]
}

// measureServers is measureServer for servers on each of rubies at once,
// each under its own load, in one recording.
func measureServers(t *testing.T, script string, rubies ...testruby.Ruby) []serverStates {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pids []int
	var dones []func() int
	for _, r := range rubies {
		cmd, lines := testruby.StartOutput(t, r, script, "4", "2")
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		if len(lines) != 1 {
			t.Fatalf("the server printed %q before ready", lines)
		}
		pids = append(pids, cmd.Process.Pid)
		dones = append(dones, loadServer(ctx, "127.0.0.1:"+strings.TrimSpace(lines[0]), 8))
	}
	time.Sleep(300 * time.Millisecond) // the load under way
	file := filepath.Join(t.TempDir(), "rubyperf.data")
	_, err := recording.Record(context.Background(), recording.Options{PIDs: pids,
		Frequency: 99, Wall: true, Duration: 3 * time.Second, Output: file})
	cancel()
	requests := make([]int, len(dones))
	for i, done := range dones {
		requests[i] = done()
	}
	if err != nil {
		t.Fatal(err)
	}
	by := make([]map[merge.State]uint64, len(pids))
	all := make([]uint64, len(pids))
	for i := range by {
		by[i] = map[merge.State]uint64{}
	}
	if _, err := readback.ReadStacks(file, readback.ReadOptions{}, func(s merge.Stack) error {
		if i := slices.Index(pids, s.PID); i >= 0 && strings.HasPrefix(s.Comm, "worker ") {
			by[i][s.State] += s.Period
			all[i] += s.Period
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	states := make([]serverStates, len(pids))
	for i, r := range rubies {
		if all[i] == 0 {
			t.Fatalf("%s: no sample of a worker thread", r.Name)
		}
		share := func(st merge.State) float64 { return float64(by[i][st]) / float64(all[i]) }
		st := serverStates{gvl: share(merge.StateGVL), blocked: share(merge.StateBlocked), offCPU: share(merge.StateOffCPU),
			running: share(merge.StateRuby) + share(merge.StateC) + share(merge.StateGC)}
		t.Logf("%s: %d requests; workers: waiting for the GVL %.1f%%, running %.1f%%, blocked %.1f%%, off the CPU %.1f%%",
			r.Name, requests[i], 100*st.gvl, 100*st.running, 100*st.blocked, 100*st.offCPU)
		if requests[i] < 100 {
			t.Errorf("%s: only %d requests answered", r.Name, requests[i])
		}
		states[i] = st
	}
	return states
}
