package export

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/merge"
)

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
	// NoIDs leaves out the pid and tid labels: for a profile of one
	// process sent where every distinct label set is a series of its own
	// (Pyroscope), which a thread id would multiply.
	NoIDs bool
	// Live: the allocation samples say whether their objects were alive
	// when the recording ended (merge.Stack.Alive): the profile has Go's
	// heap profile's inuse_objects and inuse_space beside alloc_objects
	// and alloc_space, inuse_space its default.
	Live bool
}

// WritePprof writes stacks as a gzipped pprof profile (profile.proto), the
// format of go tool pprof, Pyroscope and Parca. Each distinct stack of
// each thread is one Sample with values [samples/count, cpu/nanoseconds]
// (of allocation samples, merge.Stack.Alloc: [alloc_objects/count,
// alloc_space/bytes], as Go's heap profiles have them) and the labels "pid", "tid" and "thread" (the thread name). Every label
// is a string, numbers too: Pyroscope and Parca show only string labels,
// and pprof's -tagfocus and -tagroot take them as well.
//
// Frames become Locations, Functions and Mappings as FrameTable says, the
// same as in OTLP profiles. Mappings have HasFunctions set: the frames are
// symbolized already, and pprof leaves them as they are.
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
	p          *profile.Profile // its header, and samples without their locations
	frames     *FrameTable
	sampleLocs [][]int        // of each of p.Sample: indexes in frames.Locations
	samples    map[string]int // index in p.Sample, by sampleKey
	start, end uint64         // of the recording: each sample stands for the period before it
	n          int
	alloc      bool // its samples are allocation samples
	key        []byte
	locs       []int // the stack being added
}

// NewPprof returns an empty profile with opts.
func NewPprof(opts PprofOptions) *Pprof {
	return &Pprof{Options: opts,
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "samples", Unit: "count"},
				{Type: "cpu", Unit: "nanoseconds"},
			},
			DefaultSampleType: "cpu",
			PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		},
		frames:  NewFrameTable(),
		samples: make(map[string]int),
	}
}

// Add counts one stack. s is not kept.
func (p *Pprof) Add(s *merge.Stack) { p.AddN(s, 1) }

// AddN counts n samples of one stack (n ≥ 1). s is not kept.
func (p *Pprof) AddN(s *merge.Stack, n int64) {
	if t := s.Time - min(s.Time, s.Period); p.n == 0 || t < p.start {
		p.start = t
	}
	p.end = max(p.end, s.Time)
	p.n++

	p.locs = p.locs[:0]
	for j := range s.Frames {
		p.locs = append(p.locs, p.frames.Location(&s.Frames[j]))
	}
	p.key = sampleKey(p.key[:0], s, p.locs)
	// A CPU sample counts one and its period (ns); an allocation sample,
	// the objects and bytes it stands for.
	// An allocation sample also counts, as in use, what stands for
	// objects alive at the end (trimmed at Write unless Options.Live).
	v := [4]int64{n, n * int64(s.Period)}
	if s.Alloc {
		v[0], v[1] = n*int64(s.Period), n*int64(s.AllocBytes)
		if s.Alive {
			v[2], v[3] = v[0], v[1]
		}
		p.alloc = true
	}
	if i, ok := p.samples[string(p.key)]; ok {
		smp := p.p.Sample[i]
		for j := range smp.Value {
			smp.Value[j] += v[j]
		}
		return
	}
	values := v[:2]
	if s.Alloc {
		values = v[:]
	}
	smp := &profile.Sample{
		Value: slices.Clone(values),
		Label: map[string][]string{"thread": {threadName(s)}},
	}
	if !p.Options.NoIDs {
		smp.Label["pid"] = []string{strconv.Itoa(s.PID)}
		smp.Label["tid"] = []string{strconv.Itoa(s.TID)}
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
	p.samples[string(p.key)] = len(p.p.Sample)
	p.p.Sample = append(p.p.Sample, smp)
	p.sampleLocs = append(p.sampleLocs, slices.Clone(p.locs)) // only a new stack keeps its own
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

// profile finishes the profile: its duration, and its functions,
// locations and mappings from the frame table, which the samples get.
func (p *Pprof) profile() *profile.Profile {
	prof := p.p
	prof.Period, prof.TimeNanos, prof.DurationNanos = p.Options.Period, p.Options.TimeNanos, p.Options.DurationNanos
	if p.alloc {
		// As Go's heap profiles name them (go tool pprof -sample_index=alloc_space).
		prof.SampleType = []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"}}
		prof.DefaultSampleType = "alloc_space"
		prof.PeriodType = &profile.ValueType{Type: "space", Unit: "bytes"}
		prof.Period = 0 // samples are taken by objects, not at a rate of bytes
		if p.Options.Live {
			prof.SampleType = append(prof.SampleType, &profile.ValueType{Type: "inuse_objects", Unit: "count"},
				&profile.ValueType{Type: "inuse_space", Unit: "bytes"})
			prof.DefaultSampleType = "inuse_space"
		}
		for _, smp := range prof.Sample {
			if len(smp.Value) != len(prof.SampleType) {
				smp.Value = append(make([]int64, 0, len(prof.SampleType)), smp.Value...)[:min(len(smp.Value), len(prof.SampleType))]
				smp.Value = append(smp.Value, make([]int64, len(prof.SampleType)-len(smp.Value))...)
			}
		}
	}
	if prof.DurationNanos == 0 && p.n > 0 {
		prof.DurationNanos = int64(p.end - p.start)
	}
	t := p.frames
	prof.Mapping = make([]*profile.Mapping, len(t.Mappings))
	maps := make([]*profile.Mapping, len(t.Mappings))
	for i, id := range t.MappingIDs() {
		m := &t.Mappings[i]
		maps[i] = &profile.Mapping{ID: uint64(id), Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.File,
			BuildID: m.BuildID, HasFunctions: true}
		prof.Mapping[id-1] = maps[i]
	}
	prof.Function = make([]*profile.Function, len(t.Functions))
	for i, fn := range t.Functions {
		prof.Function[i] = &profile.Function{ID: uint64(i + 1), Name: fn.Name, SystemName: fn.SystemName, Filename: fn.File}
	}
	prof.Location = make([]*profile.Location, len(t.Locations))
	for i, l := range t.Locations {
		loc := &profile.Location{ID: uint64(i + 1), Address: l.Address,
			Line: []profile.Line{{Function: prof.Function[l.Function], Line: l.Line}}}
		if l.Mapping >= 0 {
			loc.Mapping = maps[l.Mapping]
		}
		prof.Location[i] = loc
	}
	for i, smp := range prof.Sample {
		smp.Location = make([]*profile.Location, len(p.sampleLocs[i]))
		for j, l := range p.sampleLocs[i] {
			smp.Location[j] = prof.Location[l]
		}
	}
	return prof
}

// sampleKey identifies a sample by thread and locations.
func sampleKey(key []byte, s *merge.Stack, locs []int) []byte {
	key = strconv.AppendInt(key, int64(s.PID), 10)
	key = append(key, '/')
	key = strconv.AppendInt(key, int64(s.TID), 10)
	key = append(key, '/')
	key = append(key, threadName(s)...)
	key = append(key, 0, byte(s.State))
	if s.OffCPU {
		key = append(key, 1)
	}
	if s.Alloc {
		key = append(key, 2)
	}
	for _, l := range s.Labels {
		key = append(key, l.Key...)
		key = append(key, 1)
		key = append(key, l.Value...)
		key = append(key, 1)
	}
	key = append(key, 0)
	for _, l := range locs {
		key = strconv.AppendInt(key, int64(l), 36)
		key = append(key, ',')
	}
	return key
}
