package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rubyperf/rubyperf/internal/otelcoltest"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// stack is a merged stack of pid, thread "main", leaf first.
func stack(pid int, frames ...merge.Frame) merge.Stack {
	return merge.Stack{PID: pid, TID: pid, Comm: "main", State: merge.StateRuby, Frames: frames}
}

var (
	fib   = merge.Frame{Kind: merge.KindRuby, Name: "Fib.fib", File: "/app/fib.rb", Line: 3}
	main_ = merge.Frame{Kind: merge.KindRuby, Name: "<main>", File: "/app/main.rb", Line: 9}
	times = merge.Frame{Kind: merge.KindCFunc, Name: "Integer#times", File: "/app/main.rb", Line: 9}
	memcp = merge.Frame{Kind: merge.KindNative, Name: "memcpy", File: "/usr/lib/libc.so.6", Addr: 0x7f0000001234,
		MapStart: 0x7f0000000000, MapLimit: 0x7f0000100000, MapOffset: 0x1000, BuildID: "abcdef"}
	sysc = merge.Frame{Kind: merge.KindKernel, Name: "do_syscall_64", File: "[kernel.kallsyms]", Addr: 0xffffffff81000000}
)

// roundTrip encodes iv as the agent sends it and decodes it as a collector
// would, every reference resolved.
func roundTrip(t *testing.T, iv *Interval, res Resource) []otelcoltest.Profile {
	t.Helper()
	reqs, err := iv.Requests(res, 1<<30)
	if err != nil || len(reqs) != 1 {
		t.Fatalf("%d requests (%v), want 1", len(reqs), err)
	}
	pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(reqs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	profs, err := otelcoltest.Flatten(pd)
	if err != nil {
		t.Fatal(err)
	}
	return profs
}

func names(fs []otelcoltest.Frame) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Function)
	}
	return strings.Join(out, ";")
}

// TestProfiles: an interval's samples come out per process, counted, each
// frame with its kind, file, line, mapping and build-id, over one
// dictionary whose references all resolve.
func TestProfiles(t *testing.T) {
	start := time.Unix(1700000000, 0)
	iv := NewInterval(start)
	iv.ContainerOf = func(pid int) string {
		if pid == 2 {
			return strings.Repeat("ab", 32)
		}
		return ""
	}
	p1 := &recording.Process{PID: 1, Name: "app.rb", Executable: "/usr/bin/ruby3.3", RubyVersion: "3.3.8"}
	p2 := &recording.Process{PID: 2, Name: "worker.rb", Executable: "/usr/bin/ruby3.1", RubyVersion: "3.1.7"}
	for range 3 {
		iv.Add(stack(1, fib, times, main_), p1)
	}
	iv.Add(stack(1, memcp, times, main_), p1)
	st := stack(2, sysc, memcp, times, main_)
	st.Labels = []merge.Label{{Key: "endpoint", Value: "users"}}
	st.State = merge.StateC
	iv.Add(st, p2)
	iv.End = start.Add(10 * time.Second)
	profs := roundTrip(t, iv, Resource{Host: "h1", Labels: map[string]string{"env": "test", "process.pid": "7"}, Period: 10101010, Version: "v1"})
	if len(profs) != 2 {
		t.Fatalf("%d profiles, want one per process", len(profs))
	}
	p := profs[0]
	for k, want := range map[string]any{"process.pid": int64(1), "process.executable.name": "ruby3.3",
		"process.runtime.name": "ruby", "process.runtime.version": "3.3.8", "host.name": "h1", "env": "test",
		"service.name": "app.rb"} {
		if got := p.Resource[k]; got != want {
			t.Errorf("resource %s = %v (%T), want %v", k, got, got, want)
		}
	}
	if _, ok := p.Resource["container.id"]; ok {
		t.Errorf("pid 1 is in no container, yet has container.id %v", p.Resource["container.id"])
	}
	if got := profs[1].Resource["container.id"]; got != strings.Repeat("ab", 32) {
		t.Errorf("container.id of pid 2 = %v", got)
	}
	if p.SampleType != "samples/count" || p.PeriodType != "cpu/nanoseconds" || p.Period != 10101010 {
		t.Errorf("sample type %s, period type %s, period %d", p.SampleType, p.PeriodType, p.Period)
	}
	if p.Start != start.UnixNano() || p.Duration != uint64(10*time.Second) || p.Scope != "rubyperf" {
		t.Errorf("start %d duration %d scope %q", p.Start, p.Duration, p.Scope)
	}
	if len(p.Samples) != 2 || names(p.Samples[0].Frames) != "Fib.fib;Integer#times;<main>" || p.Samples[0].Values[0] != 3 ||
		names(p.Samples[1].Frames) != "memcpy;Integer#times;<main>" || p.Samples[1].Values[0] != 1 {
		t.Fatalf("samples of pid 1: %+v", p.Samples)
	}
	f := p.Samples[0].Frames[0]
	if f.Type != "ruby" || f.File != "/app/fib.rb" || f.Line != 3 || f.Mapping != "" {
		t.Errorf("Ruby frame %+v", f)
	}
	n := p.Samples[1].Frames[0]
	if n.Type != "native" || n.Address != memcp.Addr || n.Mapping != "/usr/lib/libc.so.6" || n.BuildID != "abcdef" {
		t.Errorf("native frame %+v", n)
	}
	if a := p.Samples[0].Attrs; a["thread.name"] != "main" || a["ruby.thread.state"] != "ruby" {
		t.Errorf("sample attributes %v", a)
	}
	s2 := profs[1].Samples[0]
	if s2.Frames[0].Type != "kernel" || s2.Frames[0].Mapping != "[kernel.kallsyms]" || s2.Attrs["ruby.label.endpoint"] != "users" ||
		s2.Attrs["ruby.thread.state"] != "c" {
		t.Errorf("pid 2's sample %+v", s2)
	}
}

// TestIntervalBounds: past the bound of distinct stacks, samples are counted
// under one frame per process that says so, never dropped.
func TestIntervalBounds(t *testing.T) {
	iv := NewInterval(time.Now())
	p := &recording.Process{PID: 1}
	n := maxSamples + 10
	for i := range n {
		iv.Add(stack(1, merge.Frame{Kind: merge.KindNative, Name: "f", Addr: uint64(i)}), p)
	}
	if iv.Samples != uint64(n) || iv.OverLimit != 10 {
		t.Fatalf("%d samples, %d over the limit; want %d, 10", iv.Samples, iv.OverLimit, n)
	}
	var total int64
	over := int64(0)
	for _, s := range iv.Procs[1].Samples {
		total += s.Count
		if iv.Frames[s.Frames[0]].Name == OverLimitName {
			over = s.Count
		}
	}
	if total != int64(n) || over != 10 {
		t.Fatalf("counts sum to %d (over the limit: %d), want %d (10)", total, over, n)
	}
}

// TestRequestsSplit: an interval whose encoding is over the bound goes as
// several requests, split by process, each within the bound (a collector's
// gRPC receiver refuses a message over 4 MiB by default), holding every
// sample between them.
func TestRequestsSplit(t *testing.T) {
	iv := NewInterval(time.Now())
	const procs = 40
	for pid := 1; pid <= procs; pid++ {
		p := &recording.Process{PID: pid, Name: fmt.Sprintf("app-%d.rb", pid)}
		for i := range 300 {
			iv.Add(stack(pid, merge.Frame{Kind: merge.KindRuby, Name: fmt.Sprintf("Module%d#method_%d", pid, i), File: "/app/a_long_path/file.rb", Line: int64(i)},
				fib, times, main_), p)
		}
	}
	iv.End = iv.Start.Add(time.Second)
	all, err := iv.Requests(Resource{}, 1<<30)
	if err != nil || len(all) != 1 {
		t.Fatalf("%d requests (%v) with no bound to speak of, want 1", len(all), err)
	}
	bound := len(all[0].Body) / 5
	reqs, err := iv.Requests(Resource{}, bound)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[any]int64{}
	var samples uint64
	for i, r := range reqs {
		if len(r.Body) > bound {
			t.Errorf("request %d: %d bytes, over the bound of %d", i, len(r.Body), bound)
		}
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		profs, err := otelcoltest.Flatten(pd)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range profs {
			for _, s := range p.Samples {
				seen[p.Resource["process.pid"]] += s.Values[0]
				n += s.Values[0]
			}
		}
		if uint64(n) != r.Samples {
			t.Errorf("request %d says it holds %d samples, has %d", i, r.Samples, n)
		}
		samples += r.Samples
	}
	if len(reqs) < 5 || len(seen) != procs || samples != iv.Samples {
		t.Fatalf("%d requests, %d processes, %d samples; want 5 or more, %d, %d", len(reqs), len(seen), samples, procs, iv.Samples)
	}
	for pid, n := range seen {
		if n != 300 {
			t.Errorf("pid %v: %d samples, want 300", pid, n)
		}
	}
}

// TestLargeIntervalToCollector: a real collector refuses an interval
// encoded whole past its 4 MiB (for good: the agent does not retry it),
// and takes every request Requests splits it into.
func TestLargeIntervalToCollector(t *testing.T) {
	col := otelcoltest.Start(t)
	iv := NewInterval(time.Now())
	for pid := 1; pid <= 60; pid++ {
		p := &recording.Process{PID: pid, Name: fmt.Sprintf("app-%d.rb", pid)}
		for i := range 1000 {
			iv.Add(stack(pid, merge.Frame{Kind: merge.KindRuby, Name: fmt.Sprintf("Module%d::Handler#method_%d", pid, i),
				File: fmt.Sprintf("/srv/app/releases/20261126/app/models/module_%d/handler.rb", pid), Line: int64(i)}, fib, times, main_), p)
		}
	}
	iv.End = iv.Start.Add(10 * time.Second)
	whole, err := iv.Requests(Resource{}, 1<<30)
	if err != nil || len(whole) != 1 || len(whole[0].Body) <= 4<<20 {
		t.Fatalf("the whole interval: %d requests, %d bytes (%v); want one over 4 MiB", len(whole), len(whole[0].Body), err)
	}
	exp, err := newExporter(Endpoint{Address: col.GRPCAddr, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	ctx := context.Background()
	if _, err := exp.Export(ctx, whole[0]); err == nil || !isPermanent(err) {
		t.Fatalf("%d bytes in one request: %v; want a refusal not worth retrying", len(whole[0].Body), err)
	}
	reqs, err := iv.Requests(Resource{}, MaxRequestBytes)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if _, err := exp.Export(ctx, r); err != nil {
			t.Fatalf("request %d of %d (%d bytes): %v", i, len(reqs), len(r.Body), err)
		}
	}
	got, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	var samples int64
	for _, pd := range got {
		profs, err := otelcoltest.Flatten(pd)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range profs {
			for _, s := range p.Samples {
				samples += s.Values[0]
			}
		}
	}
	if len(got) != len(reqs) || uint64(samples) != iv.Samples {
		t.Fatalf("the collector took %d requests with %d samples; sent %d with %d", len(got), samples, len(reqs), iv.Samples)
	}
	t.Logf("%d bytes whole, refused; %d requests of at most %d bytes, all taken", len(whole[0].Body), len(reqs), MaxRequestBytes)
}

// TestFrameNames: frames are named as every other format names them: a
// native frame with no symbol after its file, a name's or a file's bytes
// that are not UTF-8 escaped (export.Printable: protobuf strings are UTF-8,
// and the path reads as in pprof and the flame graphs); and only symbols
// have a system name,
// which pprof-based tools would "demangle" ("<main>" into "<unknown>").
func TestFrameNames(t *testing.T) {
	bad := merge.Frame{Kind: merge.KindRuby, Name: "Odd#caf\xe9", File: "/app/odd\xff.rb", Line: 2}
	anon := merge.Frame{Kind: merge.KindNative, File: "/usr/lib/libfoo.so.1", Addr: 0x7f0000002000,
		MapStart: 0x7f0000000000, MapLimit: 0x7f0000100000}
	iv := NewInterval(time.Unix(100, 0))
	iv.Add(stack(1, memcp, anon, bad, main_), &recording.Process{PID: 1, Name: "app"})
	iv.End = time.Unix(110, 0)
	reqs, err := iv.Requests(Resource{}, 1<<30)
	if err != nil || len(reqs) != 1 {
		t.Fatalf("%d requests (%v), want 1", len(reqs), err)
	}
	pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(reqs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	profs, err := otelcoltest.Flatten(pd)
	if err != nil || len(profs) != 1 || len(profs[0].Samples) != 1 {
		t.Fatalf("%d profiles (%v)", len(profs), err)
	}
	got := profs[0].Samples[0].Frames
	if want := `memcpy;[libfoo.so.1];Odd#caf\xe9;<main>`; names(got) != want {
		t.Errorf("names %q, want %q", names(got), want)
	}
	if got[2].File != `/app/odd\xff.rb` {
		t.Errorf("file %q", got[2].File)
	}
	d := pd.Dictionary()
	system := map[string]string{}
	for _, fn := range d.FunctionTable().All() {
		system[d.StringTable().At(int(fn.NameStrindex()))] = d.StringTable().At(int(fn.SystemNameStrindex()))
	}
	for name, want := range map[string]string{"memcpy": "memcpy", "[libfoo.so.1]": "[libfoo.so.1]",
		`Odd#caf\xe9`: "", "<main>": ""} {
		if system[name] != want {
			t.Errorf("%q: system name %q, want %q", name, system[name], want)
		}
	}
}

// TestMappings: the mappings are export.FrameTable's, as in pprof: kernel
// frames share one mapping over the kernel addresses seen, each address in
// its mapping's range; a native frame whose mapping is unknown has neither
// mapping nor address (nothing could symbolize it); Ruby frames have none.
func TestMappings(t *testing.T) {
	sysc2 := sysc
	sysc2.Name, sysc2.Addr = "ksys_read", sysc.Addr+0x5000
	lost := merge.Frame{Kind: merge.KindNative, Name: "lost_fn", Addr: 0x7f0000009999}
	iv := NewInterval(time.Unix(100, 0))
	iv.Add(stack(1, sysc, sysc2, memcp, lost, main_), &recording.Process{PID: 1, Name: "app"})
	iv.End = time.Unix(110, 0)
	reqs, err := iv.Requests(Resource{}, 1<<30)
	if err != nil || len(reqs) != 1 {
		t.Fatalf("%d requests (%v), want 1", len(reqs), err)
	}
	pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(reqs[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	d := pd.Dictionary()
	stk := d.StackTable().At(int(pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).StackIndex()))
	type got struct {
		file         string
		start, limit uint64
		addr         uint64
	}
	var frames []got
	for _, li := range stk.LocationIndices().All() {
		loc := d.LocationTable().At(int(li))
		g := got{addr: loc.Address()}
		if mi := loc.MappingIndex(); mi != 0 {
			m := d.MappingTable().At(int(mi))
			g.file, g.start, g.limit = d.StringTable().At(int(m.FilenameStrindex())), m.MemoryStart(), m.MemoryLimit()
		}
		frames = append(frames, g)
	}
	k1, k2, n, l, r := frames[0], frames[1], frames[2], frames[3], frames[4]
	if k1.file != "[kernel.kallsyms]" || k1 != (got{k1.file, sysc.Addr, sysc2.Addr + 1, sysc.Addr}) ||
		k2 != (got{k1.file, sysc.Addr, sysc2.Addr + 1, sysc2.Addr}) {
		t.Errorf("kernel frames %+v %+v: want one mapping over both addresses", k1, k2)
	}
	if n != (got{memcp.File, memcp.MapStart, memcp.MapLimit, memcp.Addr}) {
		t.Errorf("native frame %+v", n)
	}
	if l != (got{}) || r != (got{}) {
		t.Errorf("native frame of no known mapping %+v, Ruby frame %+v: want no mapping and no address", l, r)
	}
	if d.MappingTable().Len() != 3 {
		t.Errorf("%d mappings, want the zero one, libc's and the kernel's", d.MappingTable().Len())
	}
}
