package export

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/rubyperf/rubyperf/merge"
)

// speedscopeSchema is the value of a speedscope file's "$schema" field,
// by which speedscope recognizes its own format.
const speedscopeSchema = "https://www.speedscope.app/file-format-schema.json"

// SpeedscopeOptions tunes WriteSpeedscope.
type SpeedscopeOptions struct {
	// Name is the name of the whole file, shown in speedscope's title bar;
	// "" gives "rubyperf".
	Name string
	// Exporter names the program that wrote the file, "name@version";
	// "" gives "rubyperf".
	Exporter string
	// Unit is what the stacks' Period counts: time (the default), or
	// objects or bytes allocated, which speedscope shows as counts
	// ("none") and bytes, each profile spanning its weights from 0.
	Unit Unit
}

// The speedscope file format (speedscope's src/lib/file-format-spec.ts).
// Field order follows the spec; "$schema" comes first so that a person
// reading the file sees what it is.
type (
	speedscopeFile struct {
		Schema             string              `json:"$schema"`
		Name               string              `json:"name"`
		Exporter           string              `json:"exporter"`
		ActiveProfileIndex int                 `json:"activeProfileIndex"`
		Shared             speedscopeShared    `json:"shared"`
		Profiles           []speedscopeProfile `json:"profiles"`
	}
	speedscopeShared struct {
		Frames []speedscopeFrame `json:"frames"`
	}
	speedscopeFrame struct {
		Name string `json:"name"`
		File string `json:"file,omitempty"`
	}
	speedscopeProfile struct {
		Type       string   `json:"type"` // "sampled"
		Name       string   `json:"name"`
		Unit       string   `json:"unit"`
		StartValue uint64   `json:"startValue"`
		EndValue   uint64   `json:"endValue"`
		Samples    [][]int  `json:"samples"` // indices into Shared.Frames, root first
		Weights    []uint64 `json:"weights"`
	}
)

// WriteSpeedscope writes stacks in speedscope's JSON file format: one
// "sampled" profile per thread, named "comm (tid N)" and ordered by pid
// and tid, over a frames table the profiles share. Samples keep their time
// order; weights are the stacks' Period in nanoseconds. A profile starts
// a period before its first sample (each sample stands for the CPU time
// up to it) and ends at its last. When no stack has a Period, each sample
// weighs 1 (unit "none") and profiles span their weights; when Time is
// unknown (0), a profile spans its weights from 0.
//
// Frames carry a name and a file (the Ruby source path, or the object file
// of native and kernel frames) but no line: speedscope keys frames by
// name, file and line, and the line a Ruby frame was sampled at is not the
// method's, so lines would split one method into as many frames.
func WriteSpeedscope(w io.Writer, stacks []merge.Stack, opts SpeedscopeOptions) error {
	return writeAll(w, stacks, NewSpeedscope(opts))
}

// Speedscope builds what WriteSpeedscope writes one stack at a time. The
// file lists every sample, so it holds one small entry per sample (time,
// period and the index of its distinct stack), never the stacks
// themselves.
type Speedscope struct {
	// Options may change until Write (a unit known once every stack is read).
	Options SpeedscopeOptions
	frames  map[speedscopeFrame]int // in order of first sight
	names   []speedscopeFrame
	stacks  map[string]int // distinct stacks, frame IDs root first, by key
	lists   [][]int
	threads map[speedscopeThread]*speedscopeSamples
	periods bool // some stack has a Period
	key     []byte
	ids     []int // the stack being added
}

type speedscopeThread struct{ pid, tid int }

type speedscopeSamples struct {
	name    string // the thread's name in its latest sample
	latest  uint64
	samples []speedscopeSample
}

type speedscopeSample struct {
	time, period uint64
	stack        int
}

// NewSpeedscope returns an empty speedscope file with opts.
func NewSpeedscope(opts SpeedscopeOptions) *Speedscope {
	return &Speedscope{Options: opts, frames: make(map[speedscopeFrame]int), stacks: make(map[string]int),
		threads: make(map[speedscopeThread]*speedscopeSamples)}
}

// Add counts one stack. s is not kept.
func (sp *Speedscope) Add(s *merge.Stack) {
	sp.key = sp.key[:0]
	sp.ids = sp.ids[:0]
	for j := range s.Frames {
		fr := &s.Frames[len(s.Frames)-1-j]
		k := speedscopeFrame{Name: FrameName(fr), File: Printable(fr.File)}
		id, ok := sp.frames[k]
		if !ok {
			id = len(sp.names)
			sp.frames[k] = id
			sp.names = append(sp.names, k)
		}
		sp.ids = append(sp.ids, id)
		sp.key = binary.AppendUvarint(sp.key, uint64(id))
	}
	stack, ok := sp.stacks[string(sp.key)]
	if !ok {
		stack = len(sp.lists)
		sp.stacks[string(sp.key)] = stack
		sp.lists = append(sp.lists, slices.Clone(sp.ids)) // only a new stack keeps its own
	}
	t := speedscopeThread{s.PID, s.TID}
	th := sp.threads[t]
	if th == nil {
		th = &speedscopeSamples{}
		sp.threads[t] = th
	}
	if len(th.samples) == 0 || s.Time >= th.latest {
		th.name, th.latest = threadName(s), s.Time
	}
	th.samples = append(th.samples, speedscopeSample{s.Time, s.Period, stack})
	sp.periods = sp.periods || s.Period != 0
}

// Write writes the file. It is finished by it: Add must not be called
// after.
func (sp *Speedscope) Write(w io.Writer) error {
	f := speedscopeFile{
		Schema:   speedscopeSchema,
		Name:     cmp.Or(sp.Options.Name, "rubyperf"),
		Exporter: cmp.Or(sp.Options.Exporter, "rubyperf"),
		Profiles: []speedscopeProfile{},
		Shared:   speedscopeShared{Frames: []speedscopeFrame{}},
	}

	// Threads in (pid, tid) order, each thread's samples in time order.
	threads := make([]speedscopeThread, 0, len(sp.threads))
	for t := range sp.threads {
		threads = append(threads, t)
	}
	slices.SortFunc(threads, func(a, b speedscopeThread) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid))
	})

	// Without periods, every sample weighs 1 and the unit is "none".
	unit := "nanoseconds"
	weightOf := func(s *speedscopeSample) uint64 { return s.period }
	switch {
	case !sp.periods:
		unit = "none"
		weightOf = func(*speedscopeSample) uint64 { return 1 }
	case sp.Options.Unit == UnitObjects:
		unit = "none"
	case sp.Options.Unit == UnitBytes:
		unit = "bytes"
	}

	// Frames are numbered in the order the profiles first use them, so the
	// file does not depend on the order stacks were added in.
	index := make([]int, len(sp.names))
	for i := range index {
		index[i] = -1
	}
	stacks := make([][]int, len(sp.lists)) // by stack, in file numbering
	for _, t := range threads {
		th := sp.threads[t]
		ss := th.samples
		slices.SortStableFunc(ss, func(a, b speedscopeSample) int { return cmp.Compare(a.time, b.time) })
		p := speedscopeProfile{
			Type:    "sampled",
			Name:    fmt.Sprintf("%s (tid %d)", th.name, t.tid),
			Unit:    unit,
			Samples: make([][]int, 0, len(ss)),
			Weights: make([]uint64, 0, len(ss)),
		}
		if first := ss[0]; unit == "nanoseconds" && first.time > first.period {
			p.StartValue = first.time - first.period
		}
		var sum uint64
		for i := range ss {
			s := &ss[i]
			if stacks[s.stack] == nil {
				ids := sp.lists[s.stack]
				stack := make([]int, len(ids))
				for j, id := range ids {
					if index[id] < 0 {
						index[id] = len(f.Shared.Frames)
						f.Shared.Frames = append(f.Shared.Frames, sp.names[id])
					}
					stack[j] = index[id]
				}
				stacks[s.stack] = stack
			}
			p.Samples = append(p.Samples, stacks[s.stack])
			w := weightOf(s)
			p.Weights = append(p.Weights, w)
			sum += w
		}
		// speedscope lays a thread's samples end to end by weight and takes
		// endValue - startValue as the whole: the thread's wall-clock span
		// would leave its time off the CPU as an empty stretch at the end
		// of the time-order view, not where it happened.
		p.EndValue = p.StartValue + sum
		f.Profiles = append(f.Profiles, p)
	}

	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&f); err != nil {
		return fmt.Errorf("write speedscope: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write speedscope: %w", err)
	}
	return nil
}
