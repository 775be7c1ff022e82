package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/perfmap"
	"github.com/rubyperf/rubyperf/recording"
)

// hostileRecording records testdata/ruby/hostile_names.rb for a second:
// its hottest frame's class name holds a newline, ESC and NUL.
func hostileRecording(t *testing.T) (file string, pid int) {
	t.Helper()
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "source-3.3-static") // set_temporary_name is 3.3's
	script, err := filepath.Abs("../../testdata/ruby/hostile_names.rb")
	if err != nil {
		t.Fatal(err)
	}
	target := testruby.Start(t, r, script)
	file = filepath.Join(t.TempDir(), "hostile.data")
	if _, err := recording.Record(context.Background(), recording.Options{
		PIDs: []int{target.Process.Pid}, Frequency: 199, Duration: time.Second, Output: file}); err != nil {
		t.Fatal(err)
	}
	return file, target.Process.Pid
}

// TestInjectHostileNames: a Ruby frame name holding a newline, ESC and NUL
// costs inject nothing: the perf map holds every frame name of the
// process, that one escaped as every text output shows it, each entry one
// line. Injecting the same recording again leaves the map as it was.
func TestInjectHostileNames(t *testing.T) {
	file, pid := hostileRecording(t)
	dir := t.TempDir()
	inject := func() []byte {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run([]string{"inject", "-i", file, "-o", filepath.Join(dir, "injected.data"), "--map-dir", dir}, &stdout, &stderr); code != 0 {
			t.Fatalf("inject: exit %d: %s", code, stderr.String())
		}
		b, err := os.ReadFile(perfmap.Path(dir, pid))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := inject()
	entries, err := perfmap.ReadFile(perfmap.Path(dir, pid))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name] = true
	}
	for _, want := range []string{hostileClass + ".spin_evil", "Kernel#loop", "block in <main>"} {
		if !names[want] {
			t.Errorf("the perf map does not name %q:\n%s", want, first)
		}
	}
	if lines := strings.Count(strings.TrimPrefix(string(first), "\n"), "\n"); lines != len(entries) {
		t.Errorf("the perf map has %d lines for %d entries:\n%q", lines, len(entries), first)
	}
	if again := inject(); !bytes.Equal(again, first) {
		t.Errorf("a second inject of the same recording changed the map from %d to %d bytes:\n%s", len(first), len(again), again)
	}
}

// TestInjectCraftedPIDs: a recording whose samples claim pid 1 (init) or
// 4294967295 (no process can have it) makes inject write no perf map for
// them, say so, and still name the samples of the real pid.
func TestInjectCraftedPIDs(t *testing.T) {
	file, pid := hostileRecording(t)
	crafted := filepath.Join(t.TempDir(), "crafted.data")
	claimed := []uint32{1, 4294967295, uint32(pid)}
	craftPIDs(t, file, crafted, claimed)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"inject", "-i", crafted, "-o", filepath.Join(dir, "injected.data"), "--map-dir", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("inject: exit %d: %s", code, stderr.String())
	}
	for _, bad := range []int{1, 4294967295} {
		if _, err := os.Lstat(perfmap.Path(dir, bad)); err == nil {
			t.Errorf("inject wrote %s", perfmap.Path(dir, bad))
		}
		if want := "rubyperf: pid " + strconv.Itoa(bad) + ": no perf map written"; !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
	if _, err := perfmap.ReadFile(perfmap.Path(dir, pid)); err != nil {
		t.Errorf("the real pid's map: %v", err)
	}
}

// craftPIDs copies the recording in to out with the pid of its samples
// replaced, in turn, by each of pids: what an attacker who hands root a
// recording can write.
func craftPIDs(t *testing.T, in, out string, pids []uint32) {
	t.Helper()
	n := 0
	rewriteRecording(t, in, out, recordingRewrite{record: func(r *perfdata.Reader) []byte {
		if _, ok := r.Record().(*perfdata.Sample); !ok {
			return r.Raw()
		}
		// The pid follows the header, the sample id and the ip, when present.
		st := r.Events()[0].Attr.SampleType
		if st&perfdata.SampleTID == 0 {
			t.Fatal("samples carry no pid")
		}
		off := 8
		for _, f := range []perfdata.SampleType{perfdata.SampleIdentifier, perfdata.SampleIP} {
			if st&f != 0 {
				off += 8
			}
		}
		raw := bytes.Clone(r.Raw())
		binary.LittleEndian.PutUint32(raw[off:], pids[n%len(pids)])
		n++
		return raw
	}})
	if n < 2*len(pids) {
		t.Fatalf("only %d samples to craft", n)
	}
}
