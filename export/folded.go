package export

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/rubyperf/rubyperf/merge"
)

// FoldedOptions tunes WriteFolded. The zero value gives what
// stackcollapse-perf.pl gives: the thread name as root, weights in
// nanoseconds of CPU time, no annotations.
type FoldedOptions struct {
	Root   Root
	Weight Weight
	// Annotate appends "_[k]" to kernel frames and "_[j]" to Ruby and
	// C-method frames, as stackcollapse-perf.pl --all marks kernel and
	// perf-map frames, so that flamegraph.pl --color=java colors them apart.
	Annotate bool
}

// WriteFolded writes stacks in Brendan Gregg's folded format: one line per
// distinct stack, its frames root first joined by ';', a space and the
// weight, lines sorted. flamegraph.pl, inferno and speedscope read it.
//
// Frame names are made safe for the format: ';' becomes ':' (as
// stackcollapse-perf.pl does), control characters are escaped (Printable), and a
// space before trailing digits becomes '_', since flamegraph.pl would
// read "foo 3" as a second count. Root frames (thread names) have their
// spaces replaced by '_', as stackcollapse-perf.pl does.
func WriteFolded(w io.Writer, stacks []merge.Stack, opts FoldedOptions) error {
	return writeAll(w, stacks, NewFolded(opts))
}

// Folded builds what WriteFolded writes one stack at a time, holding one
// line per distinct stack, never the stacks themselves.
type Folded struct {
	opts  FoldedOptions
	lines map[string]*foldedWeight
	b     strings.Builder
}

type foldedWeight struct{ samples, time uint64 }

// NewFolded returns an empty set of folded stacks with opts.
func NewFolded(opts FoldedOptions) *Folded {
	return &Folded{opts: opts, lines: make(map[string]*foldedWeight)}
}

// Add counts one stack. s is not kept.
func (f *Folded) Add(s *merge.Stack) {
	b := &f.b
	b.Reset()
	if root, ok := rootName(s, f.opts.Root); ok {
		b.WriteString(foldedFrame(strings.ReplaceAll(root, " ", "_")))
	}
	for j := len(s.Frames) - 1; j >= 0; j-- {
		fr := &s.Frames[j]
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(foldedFrame(FrameName(fr)))
		if f.opts.Annotate {
			b.WriteString(annotation(fr.Kind))
		}
	}
	if b.Len() == 0 {
		b.WriteString(unknown) // no root and no frames: still counted
	}
	wt := f.lines[b.String()]
	if wt == nil {
		wt = &foldedWeight{}
		f.lines[b.String()] = wt
	}
	wt.samples++
	wt.time += s.Period
}

// Write writes the lines, sorted.
func (f *Folded) Write(w io.Writer) error {
	weight := f.opts.Weight
	if weight == WeightTime {
		weight = WeightSamples // unless some stack has a Period
		for _, wt := range f.lines {
			if wt.time != 0 {
				weight = WeightTime
				break
			}
		}
	}
	lines := make([]string, 0, len(f.lines))
	for k := range f.lines {
		lines = append(lines, k)
	}
	slices.Sort(lines)
	bw := bufio.NewWriter(w)
	var num []byte
	for _, l := range lines {
		bw.WriteString(l)
		bw.WriteByte(' ')
		wt := f.lines[l]
		v := wt.time
		if weight == WeightSamples {
			v = wt.samples
		}
		num = strconv.AppendUint(num[:0], v, 10)
		num = append(num, '\n')
		bw.Write(num)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write folded stacks: %w", err)
	}
	return nil
}

// foldedFrame escapes one frame name (already Printable) for a
// folded line.
func foldedFrame(name string) string {
	name = strings.ReplaceAll(name, ";", ":")
	// flamegraph.pl splits a line at its last run of whitespace before a
	// number, and then once more if what is left also ends so (it takes
	// the line for a differential one). A frame ending in " <digits>" would
	// be misread as a count, so glue the digits to it.
	end := len(name)
	for end > 0 && (name[end-1] >= '0' && name[end-1] <= '9' || name[end-1] == '.') {
		end--
	}
	if end < len(name) && end > 0 && (name[end-1] == ' ') {
		name = name[:end-1] + "_" + name[end:]
	}
	return name
}

// annotation is the suffix stackcollapse-perf.pl --all would give a frame
// of kind k.
func annotation(k merge.Kind) string {
	switch k {
	case merge.KindKernel:
		return "_[k]"
	case merge.KindRuby, merge.KindCFunc:
		return "_[j]"
	}
	return ""
}
