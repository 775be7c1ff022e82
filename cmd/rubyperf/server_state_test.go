package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"path/filepath"
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
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd, lines := testruby.StartOutput(t, r, script, "4", "2")
			if len(lines) != 1 {
				t.Fatalf("the server printed %q before ready", lines)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := loadServer(ctx, "127.0.0.1:"+strings.TrimSpace(lines[0]), 8)
			time.Sleep(300 * time.Millisecond) // the load under way
			file := filepath.Join(t.TempDir(), "rubyperf.data")
			_, err := recording.Record(context.Background(), recording.Options{PIDs: []int{cmd.Process.Pid},
				Frequency: 99, Wall: true, Duration: 3 * time.Second, Output: file})
			cancel()
			requests := done()
			if err != nil {
				t.Fatal(err)
			}
			by := map[merge.State]uint64{}
			var all uint64
			if _, err := readback.ReadStacks(file, readback.ReadOptions{}, func(s merge.Stack) error {
				if strings.HasPrefix(s.Comm, "worker ") {
					by[s.State] += s.Period
					all += s.Period
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if all == 0 {
				t.Fatal("no sample of a worker thread")
			}
			share := func(st merge.State) float64 { return float64(by[st]) / float64(all) }
			st := serverStates{gvl: share(merge.StateGVL), blocked: share(merge.StateBlocked), offCPU: share(merge.StateOffCPU),
				running: share(merge.StateRuby) + share(merge.StateC) + share(merge.StateGC)}
			got[r.Name] = st
			t.Logf("%d requests; workers: waiting for the GVL %.1f%%, running %.1f%%, blocked %.1f%%, off the CPU %.1f%%",
				requests, 100*st.gvl, 100*st.running, 100*st.blocked, 100*st.offCPU)
			if requests < 100 {
				t.Errorf("only %d requests answered", requests)
			}
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
			t.Errorf("%s: waiting for the GVL %.1f%%, its build with DWARF %.1f%%", name, 100*st.gvl, 100*full.gvl)
		} else {
			t.Logf("%s: waiting for the GVL %.1f%%, its build with DWARF %.1f%% (%s)", name, 100*st.gvl, 100*full.gvl,
				fmt.Sprintf("%+.1f pp", 100*(st.gvl-full.gvl)))
		}
	}
}
