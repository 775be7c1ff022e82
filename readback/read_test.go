package readback

import (
	"testing"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/symtab"
)

// TestReadStockPerfCallchain: a file stock perf recorded with -g (no stack
// copies) gives native stacks from its callchains.
func TestReadStockPerfCallchain(t *testing.T) {
	named := 0
	st, err := ReadStacks("../perfdata/testdata/perf-fp.data", ReadOptions{}, func(s merge.Stack) error {
		for _, f := range s.Frames {
			if f.Kind == merge.KindNative && f.Name != "[unknown]" {
				named++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples == 0 || named == 0 || st.NoPayload != st.Samples {
		t.Errorf("%+v samples, %d named native frames", st, named)
	}
}

// TestThreadNameAtFork: a thread that never names itself has the name of
// the thread that created it (the kernel copies it at clone), and one that
// does keeps its own; one no record has named yet (its sample came before
// its FORK record) has its process's.
func TestThreadNameAtFork(t *testing.T) {
	rd := NewReader(ReadOptions{}, symtab.New(), nil, &native.Objects{})
	rd.Apply(&perfdata.Comm{Pid: 10, Tid: 10, Comm: "puma"})
	rd.Apply(&perfdata.Fork{Pid: 10, PPid: 10, Tid: 11, PTid: 10})
	rd.Apply(&perfdata.Comm{Pid: 10, Tid: 12, Comm: "worker 1"})
	rd.Apply(&perfdata.Fork{Pid: 10, PPid: 10, Tid: 12, PTid: 10})
	for tid, want := range map[uint32]string{10: "puma", 11: "puma", 12: "worker 1", 13: "puma"} {
		if got := rd.threadName(10, tid); got != want {
			t.Errorf("thread %d is %q, want %q", tid, got, want)
		}
	}
}

// TestExitingThreadNamed: the kernel writes tid -1 into a sample taken as
// its thread exits; the payload's thread id still names the thread, and a
// sample without one is not given the process's name.
func TestExitingThreadNamed(t *testing.T) {
	rd := NewReader(ReadOptions{}, symtab.New(), nil, &native.Objects{})
	rd.Apply(&perfdata.Comm{Pid: 10, Tid: 10, Comm: "puma"})
	rd.Apply(&perfdata.Comm{Pid: 10, Tid: 11, Comm: "worker 1"})
	st := rd.Stack(&perfdata.Sample{Pid: 10, Tid: exitedTID}, &payload.Payload{PID: 10, TID: 11})
	if st.TID != 11 || st.Comm != "worker 1" {
		t.Errorf("exiting thread's sample is thread %d %q, want 11 \"worker 1\"", st.TID, st.Comm)
	}
	if got := rd.threadName(10, exitedTID); got != "" {
		t.Errorf("a sample of no known thread is named %q, want none", got)
	}
}
