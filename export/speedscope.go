package export

import (
	"bufio"
	"cmp"
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
	f := speedscopeFile{
		Schema:   speedscopeSchema,
		Name:     cmp.Or(opts.Name, "rubyperf"),
		Exporter: cmp.Or(opts.Exporter, "rubyperf"),
		Profiles: []speedscopeProfile{},
		Shared:   speedscopeShared{Frames: []speedscopeFrame{}},
	}

	// Threads in (pid, tid) order, each thread's samples in time order.
	type thread struct{ pid, tid int }
	byThread := make(map[thread][]*merge.Stack)
	var threads []thread
	for i := range stacks {
		t := thread{stacks[i].PID, stacks[i].TID}
		if _, ok := byThread[t]; !ok {
			threads = append(threads, t)
		}
		byThread[t] = append(byThread[t], &stacks[i])
	}
	slices.SortFunc(threads, func(a, b thread) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.tid, b.tid))
	})

	// Without periods, every sample weighs 1 and the unit is "none".
	unit := "nanoseconds"
	weightOf := func(s *merge.Stack) uint64 { return s.Period }
	if WeightTime.resolve(stacks) == WeightSamples {
		unit = "none"
		weightOf = func(*merge.Stack) uint64 { return 1 }
	}

	index := make(map[speedscopeFrame]int)
	for _, t := range threads {
		ss := byThread[t]
		slices.SortStableFunc(ss, func(a, b *merge.Stack) int { return cmp.Compare(a.Time, b.Time) })
		p := speedscopeProfile{
			Type:    "sampled",
			Name:    fmt.Sprintf("%s (tid %d)", threadName(ss[len(ss)-1]), t.tid),
			Unit:    unit,
			Samples: make([][]int, 0, len(ss)),
			Weights: make([]uint64, 0, len(ss)),
		}
		if first := ss[0]; unit != "none" && first.Time > first.Period {
			p.StartValue = first.Time - first.Period
		}
		var sum uint64
		for _, s := range ss {
			stack := make([]int, len(s.Frames))
			for j := range s.Frames {
				fr := &s.Frames[len(s.Frames)-1-j]
				k := speedscopeFrame{Name: frameName(fr), File: cleanText(fr.File)}
				idx, ok := index[k]
				if !ok {
					idx = len(f.Shared.Frames)
					index[k] = idx
					f.Shared.Frames = append(f.Shared.Frames, k)
				}
				stack[j] = idx
			}
			p.Samples = append(p.Samples, stack)
			w := weightOf(s)
			p.Weights = append(p.Weights, w)
			sum += w
		}
		p.EndValue = ss[len(ss)-1].Time
		if p.EndValue == 0 || unit == "none" {
			p.EndValue = p.StartValue + sum // the profile spans its weights
		}
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
