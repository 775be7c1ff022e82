package export

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/merge"
)

// kernelFile is the object file name perf gives kernel frames; pprof
// treats names starting with '[' as never symbolizable.
const kernelFile = "[kernel.kallsyms]"

// PprofOptions tunes WritePprof.
type PprofOptions struct {
	// Period is the sampling period in nanoseconds, 1e9/Hz; 0 leaves it
	// unset.
	Period int64
	// TimeNanos is when the recording started, in Unix nanoseconds (wall
	// clock: the stacks' Time is perf's clock); 0 leaves it unset.
	TimeNanos int64
	// DurationNanos is how long the recording lasted; 0 takes the span of
	// the stacks' Time, from a period before the first (each sample stands
	// for the CPU time up to it) to the last.
	DurationNanos int64
}

// WritePprof writes stacks as a gzipped pprof profile (profile.proto), the
// format of go tool pprof, Pyroscope and Parca. Each distinct stack of
// each thread is one Sample with values [samples/count, cpu/nanoseconds],
// the string label "thread" (the thread name) and the numeric labels
// "pid" and "tid".
//
// Ruby and C-method frames become Locations with no Mapping and no
// Address, one per (function, line), whose Function carries the Ruby name,
// the source path as Filename, and the line. There is no binary to
// symbolize them against: without a Mapping, go tool pprof never tries
// (and prints no "symbolization failed" warnings), -list finds the source
// from Filename and Line, and a fake mapping would only add a made-up
// address range and a misleading "File:" in pprof's header. Pyroscope
// accepts locations with mapping_id 0: its ingester gives them a stub
// mapping.
//
// Native and kernel frames become Locations with their Address in a
// Mapping (Start, Limit, Offset, File, BuildID of the frame; for the
// kernel, File "[kernel.kallsyms]" over the kernel addresses seen), and a
// Function named by the symbol. Their mappings have HasFunctions set: the
// frames are symbolized already, and pprof leaves them as they are. A
// native frame whose mapping is unknown keeps only its name.
func WritePprof(w io.Writer, stacks []merge.Stack, opts PprofOptions) error {
	return writeAll(w, stacks, NewPprof(opts))
}

// Pprof builds the profile WritePprof writes one stack at a time, holding
// only what the profile holds (distinct stacks, locations, functions and
// mappings), never the stacks themselves: a recording of any length is
// converted in memory bounded by how varied it is.
type Pprof struct {
	// Options may change until Write (a reader learns the period from the
	// first sample).
	Options    PprofOptions
	b          pprofBuilder
	start, end uint64 // of the recording: each sample stands for the period before it
	n          int
	key        []byte
	locs       []*profile.Location // the stack being added
}

// NewPprof returns an empty profile with opts.
func NewPprof(opts PprofOptions) *Pprof {
	return &Pprof{Options: opts, b: pprofBuilder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "samples", Unit: "count"},
				{Type: "cpu", Unit: "nanoseconds"},
			},
			DefaultSampleType: "cpu",
			PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		},
		funcs:   make(map[funcKey]*profile.Function),
		locs:    make(map[locKey]*profile.Location),
		byFrame: make(map[merge.Frame]*profile.Location),
		maps:    make(map[mapKey]*profile.Mapping),
		samples: make(map[string]*profile.Sample),
	}}
}

// Add counts one stack. s is not kept.
func (p *Pprof) Add(s *merge.Stack) {
	b := &p.b
	if t := s.Time - min(s.Time, s.Period); p.n == 0 || t < p.start {
		p.start = t
	}
	p.end = max(p.end, s.Time)
	p.n++

	p.locs = p.locs[:0]
	for j := range s.Frames {
		p.locs = append(p.locs, b.location(&s.Frames[j]))
	}
	p.key = sampleKey(p.key[:0], s, p.locs)
	if smp := b.samples[string(p.key)]; smp != nil {
		smp.Value[0]++
		smp.Value[1] += int64(s.Period)
		return
	}
	smp := &profile.Sample{
		Location: slices.Clone(p.locs), // only a new stack keeps its own
		Value:    []int64{1, int64(s.Period)},
		Label:    map[string][]string{"thread": {threadName(s)}},
		NumLabel: map[string][]int64{"pid": {int64(s.PID)}, "tid": {int64(s.TID)}},
	}
	if s.State != merge.StateUnknown {
		smp.Label["thread_state"] = []string{s.State.String()}
	}
	if s.OffCPU {
		smp.Label["off_cpu"] = []string{"true"}
	}
	for _, l := range s.Labels {
		if _, taken := smp.Label[l.Key]; !taken {
			smp.Label[l.Key] = []string{l.Value}
		}
	}
	b.samples[string(p.key)] = smp
	b.p.Sample = append(b.p.Sample, smp)
}

// Write writes the profile, gzipped. The profile is finished by it: Add
// must not be called after.
func (p *Pprof) Write(w io.Writer) error {
	prof := p.profile()
	if err := prof.CheckValid(); err != nil {
		return fmt.Errorf("pprof: invalid profile: %w", err)
	}
	if err := prof.Write(w); err != nil {
		return fmt.Errorf("write pprof: %w", err)
	}
	return nil
}

// profile finishes the profile: its duration, and mapping IDs.
func (p *Pprof) profile() *profile.Profile {
	b := &p.b
	b.p.Period, b.p.TimeNanos, b.p.DurationNanos = p.Options.Period, p.Options.TimeNanos, p.Options.DurationNanos
	if b.p.DurationNanos == 0 && p.n > 0 {
		b.p.DurationNanos = int64(p.end - p.start)
	}
	// Mappings in address order (the main executable usually comes first,
	// the kernel last): pprof shows the first one's file as the profile's.
	slices.SortFunc(b.p.Mapping, func(x, y *profile.Mapping) int {
		return cmp.Or(cmp.Compare(x.Start, y.Start), cmp.Compare(x.Limit, y.Limit),
			strings.Compare(x.File, y.File), cmp.Compare(x.Offset, y.Offset), strings.Compare(x.BuildID, y.BuildID))
	})
	for i, m := range b.p.Mapping {
		m.ID = uint64(i + 1)
	}
	return b.p
}

type funcKey struct{ name, file string }

type locKey struct {
	fn      *profile.Function
	line    int64
	mapping *profile.Mapping
	addr    uint64
}

type mapKey struct {
	start, limit, offset uint64
	file, buildID        string
}

// pprofBuilder interns functions, locations and mappings, and merges
// samples with the same stack and labels.
type pprofBuilder struct {
	p       *profile.Profile
	funcs   map[funcKey]*profile.Function
	locs    map[locKey]*profile.Location
	byFrame map[merge.Frame]*profile.Location // what location gave each frame
	maps    map[mapKey]*profile.Mapping
	kernel  *profile.Mapping
	samples map[string]*profile.Sample
}

// sampleKey identifies a sample by thread and locations.
func sampleKey(key []byte, s *merge.Stack, locs []*profile.Location) []byte {
	key = strconv.AppendInt(key, int64(s.PID), 10)
	key = append(key, '/')
	key = strconv.AppendInt(key, int64(s.TID), 10)
	key = append(key, '/')
	key = append(key, threadName(s)...)
	key = append(key, 0, byte(s.State))
	if s.OffCPU {
		key = append(key, 1)
	}
	for _, l := range s.Labels {
		key = append(key, l.Key...)
		key = append(key, 1)
		key = append(key, l.Value...)
		key = append(key, 1)
	}
	key = append(key, 0)
	for _, l := range locs {
		key = strconv.AppendUint(key, l.ID, 36)
		key = append(key, ',')
	}
	return key
}

// location returns the interned Location of f.
func (b *pprofBuilder) location(f *merge.Frame) *profile.Location {
	// The same frame comes back on most samples: look it up as it is before
	// cleaning its names and finding its mapping and function.
	if l := b.byFrame[*f]; l != nil {
		return l
	}
	l := b.newLocation(f)
	b.byFrame[*f] = l
	return l
}

// newLocation is location for a frame not seen before (its location may
// exist already, for another frame at the same place).
func (b *pprofBuilder) newLocation(f *merge.Frame) *profile.Location {
	k := locKey{}
	var fileName string
	switch f.Kind {
	case merge.KindNative, merge.KindKernel:
		k.mapping = b.mapping(f)
		if k.mapping != nil {
			k.addr = f.Addr
		}
	default:
		// Ruby and C-method frames: a source position, no address.
		fileName = Printable(f.File)
		k.line = f.Line
	}
	k.fn = b.function(FrameName(f), fileName, f.Kind == merge.KindNative || f.Kind == merge.KindKernel)
	if l := b.locs[k]; l != nil {
		return l
	}
	l := &profile.Location{
		ID:      uint64(len(b.p.Location) + 1),
		Mapping: k.mapping,
		Address: k.addr,
		Line:    []profile.Line{{Function: k.fn, Line: k.line}},
	}
	b.locs[k] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// function returns the interned Function of that name and source file.
//
// Only symbols (native and kernel frames) get a SystemName. pprof
// "demangles" a function whose SystemName equals its Name, and takes any
// name with '<' or "::" for C++: "<main>" would print as "<unknown>",
// "Foo#<=>" as "Foo#". A Function with an empty SystemName counts as
// demangled already and keeps its Ruby name; a mangled C++ symbol of a
// native extension still gets demangled.
func (b *pprofBuilder) function(name, file string, symbol bool) *profile.Function {
	k := funcKey{name, file}
	if fn := b.funcs[k]; fn != nil {
		return fn
	}
	fn := &profile.Function{
		ID:       uint64(len(b.p.Function) + 1),
		Name:     name,
		Filename: file,
	}
	if symbol {
		fn.SystemName = name
	}
	b.funcs[k] = fn
	b.p.Function = append(b.p.Function, fn)
	return fn
}

// mapping returns the Mapping of a native or kernel frame, or nil when
// its mapping is unknown. IDs are given once all mappings are known.
func (b *pprofBuilder) mapping(f *merge.Frame) *profile.Mapping {
	if f.Kind == merge.KindKernel && f.MapLimit <= f.MapStart {
		// One mapping spans the kernel addresses seen.
		if b.kernel == nil {
			b.kernel = &profile.Mapping{Start: f.Addr, Limit: f.Addr + 1, File: kernelFile, HasFunctions: true}
			b.p.Mapping = append(b.p.Mapping, b.kernel)
		}
		b.kernel.Start = min(b.kernel.Start, f.Addr)
		b.kernel.Limit = max(b.kernel.Limit, f.Addr+1)
		if b.kernel.BuildID == "" {
			b.kernel.BuildID = f.BuildID
		}
		return b.kernel
	}
	if f.MapLimit <= f.MapStart {
		return nil
	}
	file := Printable(f.File)
	if file == "" && f.Kind == merge.KindKernel {
		file = kernelFile
	}
	k := mapKey{f.MapStart, f.MapLimit, f.MapOffset, file, f.BuildID}
	if m := b.maps[k]; m != nil {
		return m
	}
	m := &profile.Mapping{
		Start:        f.MapStart,
		Limit:        f.MapLimit,
		Offset:       f.MapOffset,
		File:         file,
		BuildID:      f.BuildID,
		HasFunctions: true,
	}
	b.maps[k] = m
	b.p.Mapping = append(b.p.Mapping, m)
	return m
}
