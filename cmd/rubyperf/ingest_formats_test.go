package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/pprof/profile"
)

// TestIngestFormatsPprof: `rubyperf convert -f pprof` of a real recording
// is what Grafana Pyroscope (POST /ingest?format=pprof, and
// push.v1.PusherService/Push) and Parca (ProfileStoreService/WriteRaw, as
// parca-push sends it) take: a gzipped profile.proto that profile.Parse
// accepts and CheckValid passes (string_table[0] empty, no ID 0, as many
// values as sample types); mapping, location and function IDs 1..N in
// table order (Parca's ValidatePprofProfile asks for that); sample types
// samples/count and cpu/nanoseconds, as Go's CPU profiles have them
// (Pyroscope names such a profile process_cpu), none with '-' (Pyroscope
// refuses those), and each cpu value the sample count times the period;
// period_type cpu/nanoseconds with the period of the sampling frequency;
// duration_nanos the recording's; every string valid UTF-8 (Pyroscope
// refuses others). time_nanos must fall within the recording:
// Pyroscope refuses profiles older than -validation.reject-older-than (1h
// by default) and Parca files a profile at time_nanos.
func TestIngestFormatsPprof(t *testing.T) {
	const d = 2 * time.Second
	before := time.Now()
	file, _ := workloadRecording(t, d)
	out := filepath.Join(t.TempDir(), "profile.pb.gz")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"convert", "-i", file, "-f", "pprof", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert -f pprof: exit %d: %s", code, stderr.String())
	}
	after := time.Now()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("not gzip-compressed: starts %x", b[:min(len(b), 4)])
	}
	p, err := profile.ParseData(b)
	if err != nil {
		t.Fatalf("profile.ParseData: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("CheckValid: %v", err)
	}
	if len(p.Sample) == 0 {
		t.Fatal("no samples")
	}

	// IDs 1..N in table order.
	for i, m := range p.Mapping {
		if m.ID != uint64(i+1) {
			t.Errorf("mapping %d has ID %d, want %d", i, m.ID, i+1)
			break
		}
	}
	for i, l := range p.Location {
		if l.ID != uint64(i+1) {
			t.Errorf("location %d has ID %d, want %d", i, l.ID, i+1)
			break
		}
	}
	for i, f := range p.Function {
		if f.ID != uint64(i+1) {
			t.Errorf("function %d has ID %d, want %d", i, f.ID, i+1)
			break
		}
	}

	// Sample types, period.
	types := map[string]int{}
	for i, st := range p.SampleType {
		types[st.Type+"/"+st.Unit] = i
		if strings.Contains(st.Type, "-") {
			t.Errorf("sample type %q has a '-'", st.Type)
		}
	}
	count, okCount := types["samples/count"]
	cpu, okCPU := types["cpu/nanoseconds"]
	if !okCount || !okCPU || len(types) != 2 {
		t.Fatalf("sample types %v, want samples/count and cpu/nanoseconds", types)
	}
	if p.PeriodType == nil || p.PeriodType.Type != "cpu" || p.PeriodType.Unit != "nanoseconds" {
		t.Errorf("period_type %v, want cpu/nanoseconds", p.PeriodType)
	}
	if want := int64(time.Second) / 499; p.Period != want { // workloadRecording samples at 499 Hz
		t.Errorf("period %d, want %d (499 Hz)", p.Period, want)
	}
	for _, s := range p.Sample {
		if s.Value[count] <= 0 || s.Value[cpu] != s.Value[count]*p.Period {
			t.Errorf("sample values %v: want a positive count and count*period (%d) cpu nanoseconds", s.Value, p.Period)
			break
		}
	}

	// Strings.
	bad := 0
	check := func(s string) {
		if !utf8.ValidString(s) {
			bad++
		}
	}
	for _, f := range p.Function {
		check(f.Name)
		check(f.SystemName)
		check(f.Filename)
	}
	for _, m := range p.Mapping {
		check(m.File)
		check(m.BuildID)
	}
	for _, s := range p.Sample {
		for k, vs := range s.Label {
			check(k)
			for _, v := range vs {
				check(v)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d strings are not valid UTF-8", bad)
	}

	// Time.
	if p.DurationNanos <= 0 || time.Duration(p.DurationNanos) > d+time.Second || time.Duration(p.DurationNanos) < d/2 {
		t.Errorf("duration_nanos %d, want about the recording's %s", p.DurationNanos, d)
	}
	// time_nanos: when sampling started, so Pyroscope and Parca file the
	// profile at its time, not at the push's or the Unix epoch's.
	start := time.Unix(0, p.TimeNanos)
	if p.TimeNanos == 0 || start.Before(before.Add(-time.Second)) || start.Add(time.Duration(p.DurationNanos)).After(after.Add(time.Second)) {
		t.Errorf("time_nanos %d (%s, +%s) is not within the recording, %s to %s", p.TimeNanos, start, time.Duration(p.DurationNanos), before, after)
	}
}
