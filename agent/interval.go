package agent

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// Bounds of one interval's profile, whatever the machine runs: past them a
// sample is counted under its process's OverLimitName stack, never dropped.
const (
	maxSamples = 1 << 17 // distinct (stack, thread, state, labels) of all processes
	maxFrames  = 1 << 18 // distinct frames
	maxProcs   = 4096    // processes
)

// OverLimitName is the one frame of the stack that counts a process's
// samples past an interval's bounds (too many distinct stacks at once, or
// too many bytes of them: Options.MemoryBudget).
const OverLimitName = "[over the agent's limit of distinct stacks]"

// Frame is a frame as a profile keeps it: what OTLP makes a location of.
type Frame struct {
	Kind       merge.Kind
	Name, File string
	Line       int64
	// Native and kernel frames: the address and its mapping.
	Addr, MapStart, MapLimit, MapOffset uint64
	BuildID                             string
}

// merged is f as the exporters' frame table takes it.
func (f *Frame) merged() merge.Frame {
	return merge.Frame{Kind: f.Kind, Name: f.Name, File: f.File, Line: f.Line, Addr: f.Addr,
		MapStart: f.MapStart, MapLimit: f.MapLimit, MapOffset: f.MapOffset, BuildID: f.BuildID}
}

// Interval is the samples of every process over one interval, aggregated:
// the samples that share their stack, thread name, state and labels count
// once, with their number.
type Interval struct {
	Start, End time.Time
	Frames     []Frame // by id
	Procs      map[int]*ProcessSamples
	Samples    uint64 // samples taken in
	// InUse counts the in-use samples added at its end: the allocation
	// samples whose objects were alive then (Options.Live).
	InUse uint64
	// OverLimit counts the samples past the bounds, counted under
	// OverLimitName stacks.
	OverLimit uint64

	// ContainerOf, if set, says what container a process is in, when its
	// first sample of the interval comes ("" for none).
	ContainerOf func(pid int) string

	frameIDs map[Frame]int32
	distinct int
	// bytes estimates what the interval holds; past maxBytes (0: no
	// bound) new stacks count under OverLimitName.
	bytes, maxBytes int64
	key             []byte  // scratch
	ids             []int32 // scratch
}

// ProcessSamples is one process's samples of an interval.
type ProcessSamples struct {
	Process   recording.Process
	Container string             // its container's id, "" for none
	Samples   map[string]*Sample // by key: stack, thread, state, labels
}

// Sample is one distinct sample of an interval and how many were taken.
type Sample struct {
	Frames []int32 // frame ids, leaf first
	Thread string
	State  merge.State
	Labels []merge.Label
	Count  int64
	// Alloc: allocation samples (record --alloc), which stand for Objects
	// objects of Bytes bytes in all; InUse: of those, the ones whose
	// objects are alive at the interval's end (an in-use profile's).
	Alloc, InUse   bool
	Objects, Bytes int64
}

// NewInterval starts an empty interval at start.
func NewInterval(start time.Time) *Interval {
	return &Interval{Start: start, Procs: map[int]*ProcessSamples{}, frameIDs: map[Frame]int32{}}
}

// Add counts one merged stack of process p.
//
// An allocation sample marked Alive stands for objects in use at the
// interval's end: it counts in an in-use profile, apart.
func (iv *Interval) Add(st merge.Stack, p *recording.Process) {
	inUse := st.Alloc && st.Alive
	if inUse {
		iv.InUse++
	} else {
		iv.Samples++
	}
	ps := iv.Procs[st.PID]
	if ps == nil {
		if len(iv.Procs) >= maxProcs {
			iv.OverLimit++
			return
		}
		ps = &ProcessSamples{Process: *p, Samples: map[string]*Sample{}}
		if iv.ContainerOf != nil {
			ps.Container = iv.ContainerOf(st.PID)
		}
		iv.Procs[st.PID] = ps
	}
	if iv.distinct >= maxSamples || len(iv.frameIDs)+len(st.Frames) > maxFrames ||
		iv.maxBytes > 0 && iv.bytes+iv.stackBytes(st) > iv.maxBytes {
		iv.overLimit(ps, st)
		return
	}
	k, ids := iv.key[:0], iv.ids[:0]
	for _, f := range st.Frames {
		id := iv.frameID(f)
		ids = append(ids, id)
		k = binary.LittleEndian.AppendUint32(k, uint32(id))
	}
	k = append(k, 0)
	k = append(k, st.Comm...)
	k = append(k, 0, byte(st.State))
	if st.Alloc {
		k = append(k, 'a')
	}
	if inUse {
		k = append(k, 'u')
	}
	for _, l := range st.Labels {
		k = append(k, 0)
		k = append(k, l.Key...)
		k = append(k, 0)
		k = append(k, l.Value...)
	}
	iv.key, iv.ids = k, ids
	if s, ok := ps.Samples[string(k)]; ok {
		s.count(st)
		return
	}
	s := &Sample{Frames: slices.Clone(ids), Thread: strings.Clone(st.Comm), State: st.State, Alloc: st.Alloc, InUse: inUse}
	s.count(st)
	for _, l := range st.Labels {
		s.Labels = append(s.Labels, merge.Label{Key: strings.Clone(l.Key), Value: strings.Clone(l.Value)})
	}
	ps.Samples[string(k)] = s
	iv.distinct++
	iv.bytes += sampleOverhead + 2*int64(len(k)) + 4*int64(len(ids))
}

// Estimated bytes an interval holds beyond strings: a distinct sample (its
// map entry and struct), a distinct frame (its place in Frames and
// frameIDs).
const (
	sampleOverhead = int64(unsafe.Sizeof(Sample{})) + 64
	frameOverhead  = 2*int64(unsafe.Sizeof(Frame{})) + 64
)

// stackBytes is at most what adding st costs the interval: its frames as
// if all new, and its sample as if new.
func (iv *Interval) stackBytes(st merge.Stack) int64 {
	n := sampleOverhead + 12*int64(len(st.Frames)) + int64(len(st.Comm))
	for _, f := range st.Frames {
		n += int64(len(f.Name) + len(f.File) + len(f.BuildID))
	}
	return n + frameOverhead*int64(len(st.Frames))
}

// count counts st in s: one sample more, and what an allocation sample
// stands for.
func (s *Sample) count(st merge.Stack) {
	s.Count++
	if st.Alloc {
		s.Objects += int64(min(st.Period, math.MaxInt64/2))
		s.Bytes += int64(min(st.AllocBytes, math.MaxInt64/2))
	}
}

// overLimit counts st, a sample of ps, under its OverLimitName stack.
func (iv *Interval) overLimit(ps *ProcessSamples, st merge.Stack) {
	iv.OverLimit++
	key := "\xffover"
	if st.Alloc {
		key += "-alloc"
	}
	inUse := st.Alloc && st.Alive
	if inUse {
		key += "-inuse"
	}
	if s, ok := ps.Samples[key]; ok {
		s.count(st)
		return
	}
	id := iv.frameID(merge.Frame{Kind: merge.KindState, Name: OverLimitName})
	s := &Sample{Frames: []int32{id}, Alloc: st.Alloc, InUse: inUse}
	s.count(st)
	ps.Samples[key] = s
}

// frameID is the id of frame f in the interval, added if new.
func (iv *Interval) frameID(f merge.Frame) int32 {
	k := Frame{Kind: f.Kind, Name: f.Name, File: f.File, Line: f.Line, Addr: f.Addr,
		MapStart: f.MapStart, MapLimit: f.MapLimit, MapOffset: f.MapOffset, BuildID: f.BuildID}
	if id, ok := iv.frameIDs[k]; ok {
		return id
	}
	id := int32(len(iv.Frames))
	iv.Frames = append(iv.Frames, k)
	iv.frameIDs[k] = id
	iv.bytes += frameOverhead + int64(len(k.Name)+len(k.File)+len(k.BuildID))
	return id
}
