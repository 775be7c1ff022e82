package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// TestSpeedscopeGolden pins the speedscope file of the test profile
// (indented here for review; the writer writes it on one line).
func TestSpeedscopeGolden(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSpeedscope(&buf, testStacks(), SpeedscopeOptions{Name: "bench.rb", Exporter: "rubyperf@test"}); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 {
		t.Errorf("output has %d lines, want 1", n)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, buf.Bytes(), "", "  "); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	golden(t, "speedscope.json", pretty.Bytes())
	checkSpeedscope(t, buf.Bytes())
}

// checkSpeedscope validates a file against what speedscope's schema
// (file-format-spec.ts) requires and its importer checks: "$schema",
// shared.frames with a name each, and sampled profiles with name, unit,
// startValue <= endValue, samples of in-range frame indices, and one
// non-negative weight per sample.
func checkSpeedscope(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var f map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if f["$schema"] != "https://www.speedscope.app/file-format-schema.json" {
		t.Errorf("$schema is %v", f["$schema"])
	}
	for _, k := range []string{"name", "exporter"} {
		if _, ok := f[k].(string); !ok {
			t.Errorf("%s is not a string: %v", k, f[k])
		}
	}
	shared, ok := f["shared"].(map[string]any)
	if !ok {
		t.Fatalf("no shared object")
	}
	frames, ok := shared["frames"].([]any)
	if !ok {
		t.Fatalf("no shared.frames array")
	}
	for i, fr := range frames {
		m, ok := fr.(map[string]any)
		if !ok {
			t.Fatalf("frame %d is not an object", i)
		}
		if name, ok := m["name"].(string); !ok || name == "" {
			t.Errorf("frame %d has no name", i)
		}
		if file, ok := m["file"]; ok {
			if _, ok := file.(string); !ok {
				t.Errorf("frame %d: file is not a string", i)
			}
		}
	}
	profiles, ok := f["profiles"].([]any)
	if !ok {
		t.Fatalf("no profiles array")
	}
	if i, err := f["activeProfileIndex"].(json.Number).Int64(); err != nil || i < 0 || (len(profiles) > 0 && i >= int64(len(profiles))) {
		t.Errorf("activeProfileIndex %v", f["activeProfileIndex"])
	}
	units := map[string]bool{"none": true, "nanoseconds": true, "microseconds": true, "milliseconds": true, "seconds": true, "bytes": true}
	for pi, p := range profiles {
		p := p.(map[string]any)
		where := fmt.Sprintf("profile %d", pi)
		if p["type"] != "sampled" {
			t.Errorf("%s: type %v", where, p["type"])
		}
		if name, ok := p["name"].(string); !ok || name == "" {
			t.Errorf("%s: no name", where)
		}
		if u, _ := p["unit"].(string); !units[u] {
			t.Errorf("%s: unit %v", where, p["unit"])
		}
		start, err1 := p["startValue"].(json.Number).Float64()
		end, err2 := p["endValue"].(json.Number).Float64()
		if err1 != nil || err2 != nil || start > end {
			t.Errorf("%s: startValue %v, endValue %v", where, p["startValue"], p["endValue"])
		}
		samples, ok1 := p["samples"].([]any)
		weights, ok2 := p["weights"].([]any)
		if !ok1 || !ok2 || len(samples) != len(weights) {
			t.Fatalf("%s: %d samples, %d weights", where, len(samples), len(weights))
		}
		var sum float64
		for i, s := range samples {
			for _, idx := range s.([]any) {
				n, err := idx.(json.Number).Int64()
				if err != nil || n < 0 || n >= int64(len(frames)) {
					t.Errorf("%s: sample %d: frame index %v out of range", where, i, idx)
				}
			}
			w, err := weights[i].(json.Number).Float64()
			if err != nil || w < 0 {
				t.Errorf("%s: weight %d is %v", where, i, weights[i])
			}
			sum += w
		}
		// speedscope takes the span as the whole of the samples laid end
		// to end: a longer one leaves an empty stretch in its time order.
		if sum != end-start {
			t.Errorf("%s: weights add up to %v, the profile's span is %v", where, sum, end-start)
		}
	}
	return f
}

// TestSpeedscopeContent checks the file against the stacks: a profile per
// thread in (pid, tid) order, stacks root first, weights the periods.
func TestSpeedscopeContent(t *testing.T) {
	stacks := testStacks()
	var buf bytes.Buffer
	if err := WriteSpeedscope(&buf, stacks, SpeedscopeOptions{}); err != nil {
		t.Fatal(err)
	}
	var f speedscopeFile
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	if f.Name != "rubyperf" || f.Exporter != "rubyperf" {
		t.Errorf("name %q exporter %q", f.Name, f.Exporter)
	}
	var names []string
	for _, p := range f.Profiles {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ", "); got != "ruby (tid 4242), worker pool (tid 4243), rake (tid 5151)" {
		t.Errorf("profiles %s", got)
	}
	// The samples of each thread, in order, as root-first name lists.
	want := make(map[string][]string)
	for _, s := range stacks {
		var names []string
		for i := len(s.Frames) - 1; i >= 0; i-- {
			names = append(names, FrameName(&s.Frames[i]))
		}
		k := fmt.Sprintf("%s (tid %d)", s.Comm, s.TID)
		want[k] = append(want[k], strings.Join(names, ";")+fmt.Sprintf(" %d", s.Period))
	}
	for _, p := range f.Profiles {
		var got []string
		for i, s := range p.Samples {
			var names []string
			for _, idx := range s {
				names = append(names, f.Shared.Frames[idx].Name)
			}
			got = append(got, strings.Join(names, ";")+fmt.Sprintf(" %d", p.Weights[i]))
		}
		if strings.Join(got, "\n") != strings.Join(want[p.Name], "\n") {
			t.Errorf("%s: samples\n%s\nwant\n%s", p.Name, strings.Join(got, "\n"), strings.Join(want[p.Name], "\n"))
		}
	}
	// Frames are shared, not repeated.
	seen := make(map[speedscopeFrame]bool)
	for _, fr := range f.Shared.Frames {
		if seen[fr] {
			t.Errorf("frame %+v twice", fr)
		}
		seen[fr] = true
	}
}

// TestSpeedscopeEmpty writes a file with no profiles.
func TestSpeedscopeEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSpeedscope(&buf, nil, SpeedscopeOptions{}); err != nil {
		t.Fatal(err)
	}
	checkSpeedscope(t, buf.Bytes())
}

// TestSpeedscopeSpanIsItsWeights: a thread off the CPU for a while (two
// samples two seconds apart) spans what its samples weigh, not the wall
// clock: speedscope lays samples end to end, and a wall-clock span would
// leave most of its time-order view empty.
func TestSpeedscopeSpanIsItsWeights(t *testing.T) {
	frames := rootFirst(ruby("<main>", "app.rb", 1))
	stacks := []merge.Stack{
		{PID: 1, TID: 1, Comm: "ruby", Time: 1_000_000_000, Period: 1_000_000, Frames: frames},
		{PID: 1, TID: 1, Comm: "ruby", Time: 3_000_000_000, Period: 1_000_000, Frames: frames},
	}
	var buf bytes.Buffer
	if err := WriteSpeedscope(&buf, stacks, SpeedscopeOptions{}); err != nil {
		t.Fatal(err)
	}
	var f speedscopeFile
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	p := f.Profiles[0]
	if p.StartValue != 999_000_000 || p.EndValue-p.StartValue != 2_000_000 {
		t.Errorf("startValue %d, endValue %d: want a span of the two samples' 2 ms from 999000000", p.StartValue, p.EndValue)
	}
}

// TestSpeedscopeAllocUnits: allocation samples weigh their objects as a
// count ("none") or their bytes ("bytes"), each profile spanning its
// weights from 0, not a time.
func TestSpeedscopeAllocUnits(t *testing.T) {
	frames := rootFirst(ruby("<main>", "app.rb", 1))
	stacks := []merge.Stack{
		{PID: 1, TID: 1, Comm: "ruby", Time: 1_000_000_000, Period: 1638, Alloc: true, Frames: frames},
		{PID: 1, TID: 1, Comm: "ruby", Time: 3_000_000_000, Period: 409, Alloc: true, Frames: frames},
	}
	for unit, want := range map[Unit]string{UnitObjects: "none", UnitBytes: "bytes"} {
		var buf bytes.Buffer
		if err := WriteSpeedscope(&buf, stacks, SpeedscopeOptions{Unit: unit}); err != nil {
			t.Fatal(err)
		}
		var f speedscopeFile
		if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
			t.Fatal(err)
		}
		p := f.Profiles[0]
		if p.Unit != want || p.StartValue != 0 || p.EndValue != 2047 || !slices.Equal(p.Weights, []uint64{1638, 409}) {
			t.Errorf("unit %d: %q from %d to %d, weights %v; want %q from 0 to 2047, weights [1638 409]", unit, p.Unit, p.StartValue, p.EndValue, p.Weights, want)
		}
	}
}
