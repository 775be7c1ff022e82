package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestAgentAlloc: an agent sampling allocations (Options.Alloc) sends,
// for each process and interval, a CPU profile and allocation profiles
// named as Go's heap profiles (alloc_objects/count, alloc_space/bytes),
// in which testdata/ruby/alloc.rb's methods have their share of the
// objects within 3 points of what Ruby counted, and its classes (the
// samples' ruby.object.class attribute) the same shares.
func TestAgentAlloc(t *testing.T) {
	col := otelcoltest.Start(t)
	r := testruby.Get(t, testRuby)
	counts := filepath.Join(t.TempDir(), "counts.json")
	cmd := testruby.Start(t, r, script("alloc.rb"), "10", counts)
	stop, log := startAgent(t, Options{Endpoint: Endpoint{Address: col.GRPCAddr, Insecure: true}, Interval: 2 * time.Second,
		Alloc: bpf.DefaultAllocEvery})
	time.Sleep(10 * time.Second)
	st := stop()
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var c struct{ Objects, Arrays, Strings, Hashes float64 }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(counts)
		if err == nil && json.Unmarshal(b, &c) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alloc.rb wrote no counts: %v", err)
		}
	}
	t.Logf("%d samples; log:\n%s", st.Samples, log)

	byType := map[string][]otelcoltest.Profile{}
	for _, profs := range received(t, col) {
		for _, p := range profs {
			if p.Resource["process.pid"] == int64(cmd.Process.Pid) {
				byType[p.SampleType] = append(byType[p.SampleType], p)
			}
		}
	}
	for _, typ := range []string{"samples/count", "alloc_objects/count", "alloc_space/bytes"} {
		if len(byType[typ]) == 0 {
			t.Errorf("no %s profile of pid %d (profiles: %d types)", typ, cmd.Process.Pid, len(byType))
		}
	}
	for _, p := range byType["alloc_objects/count"] {
		if p.PeriodType != "space/bytes" {
			t.Errorf("alloc_objects profile with period type %q, want space/bytes", p.PeriodType)
		}
	}
	all := c.Objects + c.Arrays + c.Strings + c.Hashes
	want := map[string]float64{"Alloc#objects": c.Objects / all, "Alloc#arrays": c.Arrays / all,
		"Alloc#strings": c.Strings / all, "Alloc#hashes": c.Hashes / all}
	got, objects := shares(byType["alloc_objects/count"], cmd.Process.Pid, "Alloc#objects", "Alloc#arrays", "Alloc#strings", "Alloc#hashes")
	_, bytes := shares(byType["alloc_space/bytes"], cmd.Process.Pid)
	t.Logf("%d objects of %d bytes in the alloc profiles; shares %v, Ruby counted %v", objects, bytes, got, want)
	for m, w := range want {
		if d := got[m] - w; d > 0.03 || d < -0.03 {
			t.Errorf("%s: %.1f%% of the objects in the agent's profiles, Ruby counted %.1f%%", m, 100*got[m], 100*w)
		}
	}
	// Each method allocates one class: the samples' ruby.object.class
	// attributes have its share.
	classes := map[string]float64{}
	for _, p := range byType["alloc_objects/count"] {
		for _, s := range p.Samples {
			classes[s.Attrs["ruby.object.class"]] += float64(s.Values[0]) / float64(max(objects, 1))
		}
	}
	t.Logf("classes %v", classes)
	for class, m := range map[string]string{"Object": "Alloc#objects", "Array": "Alloc#arrays", "String": "Alloc#strings", "Hash": "Alloc#hashes"} {
		if d := classes[class] - want[m]; d > 0.03 || d < -0.03 {
			t.Errorf("class %s: %.1f%% of the objects in the agent's profiles, Ruby counted %.1f%% for %s", class, 100*classes[class], 100*want[m], m)
		}
	}
	if per := float64(bytes) / float64(max(objects, 1)); per < 39 || per > 52 {
		t.Errorf("alloc_space / alloc_objects = %.1f bytes an object, want 40 to 49", per)
	}
}
