package rubystack

import (
	"bytes"
	"flag"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/rubybuild"
)

var update = flag.Bool("update", false, "rewrite testdata fixtures from live processes")

const memFixture = "testdata/methods-3.3.8.mem"

// TestReplaySnapshot records the reads of a live snapshot, saves them, and
// replays the walk from the file: the same stacks come out.
func TestReplaySnapshot(t *testing.T) {
	r := testruby.Get(t, "source-3.3-static")
	cmd, _ := startScenario(t, r, "methods")
	live := parkedSnapshot(t, cmd.Process.Pid)

	p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := &RecordingMemory{Inner: &ProcessMemory{PID: p.PID}}
	rd, err := NewReader(p, rec)
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := rd.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rec.Save(&buf, rd.SavedHeader()); err != nil {
		t.Fatal(err)
	}
	saved, err := LoadMemory(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	replayed, err := ReplayReader(saved, rd.Layout).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range [][]ThreadStack{recorded, replayed} {
		if !reflect.DeepEqual(framesOf(s), framesOf(live)) {
			t.Errorf("stacks differ from the live snapshot:\n%v\n%v", framesOf(s), framesOf(live))
		}
	}
	t.Logf("%d bytes of memory snapshot for %d frames", buf.Len(), len(live[0].Frames))
	if *update {
		if err := os.WriteFile(memFixture, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func framesOf(stacks []ThreadStack) [][]Frame {
	var out [][]Frame
	for _, s := range stacks {
		out = append(out, s.Frames)
	}
	return out
}

// TestReplayFixture walks the committed memory snapshot (made by
// TestReplaySnapshot -update) with the built-in 3.3.8 table: no live
// process, no DWARF.
func TestReplayFixture(t *testing.T) {
	f, err := os.Open(memFixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := LoadMemory(f)
	if err != nil {
		t.Fatal(err)
	}
	l, err := rubybuild.BuiltinLayout(m.Header.Version, m.Header.Arch)
	if err != nil {
		t.Fatal(err)
	}
	stacks, err := ReplayReader(m, l).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(stacks) != 1 {
		t.Fatalf("%d threads", len(stacks))
	}
	var labels []string
	for _, f := range stacks[0].Frames {
		labels = append(labels, f.Label)
	}
	want := []string{"Kernel#sleep", "Oracle.park", "#<instance of Object>.single", "Foo#deeper", "Foo#nested",
		"Integer#times", "Foo#nested", "Array#each", "Foo#nested", "Foo#step1", "Util.helper", "Foo#step1",
		"Mixin#mixed", "Array#map", "Mixin#mixed", "Foo#step1", "Point#go", "<main>"}
	if !reflect.DeepEqual(labels, want) {
		t.Errorf("labels\n%q\nwant\n%q", labels, want)
	}
}

// FuzzReplay walks mutated memory snapshots: whatever the bytes, the walk
// returns (frames or an error) without panicking or looping.
func FuzzReplay(f *testing.F) {
	seed, err := os.ReadFile(memFixture)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	l, err := rubybuild.BuiltinLayout("3.3.8", "x86_64")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := LoadMemory(bytes.NewReader(data))
		if err != nil {
			return
		}
		start := time.Now()
		r := ReplayReader(m, l)
		r.Snapshot()
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("walk took %v", d)
		}
	})
}
