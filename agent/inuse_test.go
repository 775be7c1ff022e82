package agent

import (
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// TestAgentInUse: an agent following its allocation samples' objects
// (Options.Live) sends, beside the allocation profiles, in-use profiles
// (inuse_objects/count, inuse_space/bytes) of what is alive at each
// interval's end: on testdata/ruby/leak.rb, whose Cache#remember keeps
// every object it makes while Report#render allocates ten times as many
// that die at once, the in-use weight sits on Cache#remember, and grows
// from interval to interval as the cache does.
func TestAgentInUse(t *testing.T) {
	col := otelcoltest.Start(t)
	r := testruby.Get(t, testRuby)
	cmd := testruby.Start(t, r, script("leak.rb"), "14")
	stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: col.GRPCAddr, Insecure: true}, Interval: 2 * time.Second,
		Alloc: bpf.DefaultAllocEvery, Live: true})
	time.Sleep(10 * time.Second)
	st := stop()
	t.Logf("%d samples; log:\n%s", st.Samples, log)
	byType := map[string][]otelcoltest.Profile{}
	for _, profs := range received(t, col) {
		for _, p := range profs {
			if p.Resource["process.pid"] == int64(cmd.Process.Pid) {
				byType[p.SampleType] = append(byType[p.SampleType], p)
			}
		}
	}
	for _, typ := range []string{"alloc_objects/count", "inuse_objects/count", "inuse_space/bytes"} {
		if len(byType[typ]) == 0 {
			t.Fatalf("no %s profile of pid %d", typ, cmd.Process.Pid)
		}
	}
	got, bytes := shares(byType["inuse_space/bytes"], cmd.Process.Pid, "Cache#remember", "Report#render")
	alloc, _ := shares(byType["alloc_objects/count"], cmd.Process.Pid, "Cache#remember", "Report#render")
	t.Logf("in use: %d bytes over %d profiles, %.1f%% Cache#remember, %.1f%% Report#render; allocated: %.1f%% and %.1f%%",
		bytes, len(byType["inuse_space/bytes"]), 100*got["Cache#remember"], 100*got["Report#render"],
		100*alloc["Cache#remember"], 100*alloc["Report#render"])
	if got["Cache#remember"] < 0.90 || got["Report#render"] > 0.05 {
		t.Errorf("in use: %.1f%% on Cache#remember (want ≥ 90%%), %.1f%% on Report#render (want ≤ 5%%)",
			100*got["Cache#remember"], 100*got["Report#render"])
	}
	if alloc["Report#render"] < 0.5 {
		t.Errorf("allocated: %.1f%% by Report#render, the churn: the workload is not what the test means", 100*alloc["Report#render"])
	}
	// The cache grows: the in-use objects of the last profile outnumber
	// those of the first.
	var first, last int64
	profs := byType["inuse_objects/count"]
	for _, s := range profs[0].Samples {
		first += s.Values[0]
	}
	for _, s := range profs[len(profs)-1].Samples {
		last += s.Values[0]
	}
	t.Logf("in-use objects: %d in the first profile, %d in the last of %d", first, last, len(profs))
	if len(profs) < 2 || last <= first {
		t.Errorf("in-use objects did not grow with the cache: %d then %d over %d profiles", first, last, len(profs))
	}
}

// TestInUseKeepsWhatIsFollowed: the in-use store counts what the
// recording says is alive, keeps what it has not been asked of yet, and
// forgets (and frees the stacks of) what it no longer follows.
func TestInUseKeepsWhatIsFollowed(t *testing.T) {
	u := newInUse()
	p := &recording.Process{PID: 7}
	stack := func(slot uint64, name string) merge.Stack {
		return merge.Stack{PID: 7, Alloc: true, Period: 10, AllocBytes: 400, Object: merge.AllocObject{Seq: uint32(slot), Slot: slot},
			Frames: []merge.Frame{{Kind: merge.KindRuby, Name: name}}}
	}
	k := func(slot uint64) inUseKey { return inUseKey{7, merge.AllocObject{Seq: uint32(slot), Slot: slot}} }
	u.add(stack(1, "Cache#remember"), p)
	u.add(stack(2, "Cache#remember"), p)
	iv := NewInterval(time.Now())
	u.cut(followed{k(1): true}, iv) // asked before the next cut: all kept
	if iv.InUse != 1 || len(u.objects) != 2 {
		t.Fatalf("first cut: %d in use, %d kept; want 1 and 2", iv.InUse, len(u.objects))
	}
	for _, s := range iv.Procs[7].Samples {
		if !s.InUse || s.Objects != 10 || s.Bytes != 400 {
			t.Errorf("in-use sample %+v", s)
		}
	}
	u.add(stack(3, "Report#render"), p)
	if len(u.stacks) != 2 || u.frames != 2 {
		t.Fatalf("%d stacks of %d frames, want 2 of 2", len(u.stacks), u.frames)
	}
	// Slot 2 is no longer followed (it died); slot 3 was sampled after the
	// recording was asked: kept though not named.
	iv = NewInterval(time.Now())
	u.cut(followed{k(1): true}, iv)
	if iv.InUse != 1 || len(u.objects) != 2 {
		t.Fatalf("second cut: %d in use, %d kept; want 1 and 2", iv.InUse, len(u.objects))
	}
	// Slot 3 died too: its stack goes with it.
	iv = NewInterval(time.Now())
	u.cut(followed{k(1): true}, iv)
	if len(u.objects) != 1 || len(u.stacks) != 1 || u.frames != 1 {
		t.Fatalf("third cut: %d kept, %d stacks of %d frames; want 1, 1, 1", len(u.objects), len(u.stacks), u.frames)
	}
	// A recording that is gone says nothing: nothing counted, nothing lost.
	iv = NewInterval(time.Now())
	u.cut(nil, iv)
	if iv.InUse != 0 || len(u.objects) != 1 {
		t.Errorf("no recording: %d in use, %d kept", iv.InUse, len(u.objects))
	}
}
