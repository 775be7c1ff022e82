package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/outfile"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/perfmap"
)

// rubyFrameSize is the span each Ruby frame gets in its process's synthetic
// code range: perf names any address inside it from the perf map.
const rubyFrameSize = 16

// maxPID is the kernel's PID_MAX_LIMIT on 64-bit machines, the most that
// /proc/sys/kernel/pid_max can be set to: no process anywhere has a
// larger pid.
const maxPID = 4 << 20

func runInject(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	in := addInputFlags(fs)
	in.every = true // each sample of the recording is written, under its event
	out := fs.String("o", "", "the perf.data to write")
	mapDir := fs.String("map-dir", perfmap.DefaultDir, "where perf-PID.map files go (perf reads /tmp)")
	if err := in.parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageError{"give -o OUT"}
	}
	if *out == *in.input {
		return usageError{"-o must differ from -i"}
	}
	if err := outfile.Check(*out); err != nil {
		return err // before reading the recording or writing any perf map
	}
	stacks, _, err := in.stacks(stderr)
	if err != nil {
		return err
	}
	src, err := perfdata.Open(*in.input)
	if err != nil {
		return err
	}
	defer src.Close()
	if len(src.Events()) == 0 {
		return fmt.Errorf("%s: no events", *in.input)
	}

	// One synthetic address per distinct Ruby frame name of each process,
	// named in /tmp/perf-PID.map beside whatever YJIT wrote there.
	names := map[int]map[string]uint64{}
	for _, s := range stacks {
		for _, f := range s.Frames {
			if synthetic(f.Kind) {
				if names[s.PID] == nil {
					names[s.PID] = map[string]uint64{}
				}
				names[s.PID][f.Name] = 0
			}
		}
	}
	type region struct{ base, span uint64 }
	regions := map[int]region{}
	for _, pid := range slices.Sorted(maps.Keys(names)) {
		byName := names[pid]
		if !recordablePID(pid) {
			// A crafted recording could otherwise have root write the map
			// of init, or of a pid no process can have.
			fmt.Fprintf(stderr, "rubyperf: pid %d: no perf map written: no recorded Ruby has that pid (2 to %d); its Ruby frames stay unnamed in %s\n",
				pid, maxPID, *out)
			delete(names, pid)
			continue
		}
		list, entries, left := mapEntries(byName)
		if left.n > 0 {
			fmt.Fprintf(stderr, "rubyperf: pid %d: %d Ruby frame names left out of %s, perf could not read them back (%s: %v); those frames stay unnamed\n",
				pid, left.n, perfmap.Path(*mapDir, pid), fmt.Sprintf("%.60q", left.example), left.why)
		}
		if len(entries) == 0 {
			continue
		}
		path, base, err := perfmap.WriteSynthetic(*mapDir, pid, entries, nil)
		if err != nil {
			return err
		}
		for i, n := range list {
			byName[n] = base + entries[i].Start
		}
		regions[pid] = region{base, uint64(len(entries)) * rubyFrameSize}
		fmt.Fprintf(stderr, "rubyperf: %d Ruby frame names of pid %d in %s\n", len(entries), pid, path)
	}

	dst, err := outfile.Create(*out, 0o600)
	if err != nil {
		return err
	}
	defer dst.Abort()
	w, err := perfdata.NewWriter(dst.File)
	if err != nil {
		return err
	}
	// The same event, but samples carry the merged callchain instead of a
	// stack copy to unwind (perf would unwind it and drop ours).
	attr := src.Events()[0].Attr
	attr.SampleType = perfdata.SampleIP | perfdata.SampleTID | perfdata.SampleTime | perfdata.SampleCPU |
		perfdata.SamplePeriod | perfdata.SampleCallchain
	attr.SampleRegsUser, attr.SampleStackUser = 0, 0
	attr.Flags &^= perfdata.FlagExcludeCallchainUser
	events, err := injectEvents(w, attr, src.Events()[0].Name, stacks)
	if err != nil {
		return err
	}
	for _, feat := range src.Features() {
		if feat == perfdata.FeatEventDesc || !feat.KnownToPerf() {
			continue // perf inject crashes on a feature it does not know
		}
		if b, ok := src.Feature(feat); ok {
			w.SetFeature(feat, b)
		}
	}
	// The mapping must come after the process's exec (perf starts a new
	// address space there) and before its first sample.
	first := map[int]uint64{}
	for _, s := range stacks {
		if t, ok := first[s.PID]; !ok || s.Time < t {
			first[s.PID] = s.Time
		}
	}
	for pid, r := range regions {
		at := first[pid]
		if at > 0 {
			at--
		}
		rec := &perfdata.Mmap2{Misc: perfdata.MiscUser, Pid: uint32(pid), Tid: uint32(pid), Addr: r.base, Len: r.span,
			Prot: 5 /* PROT_READ|PROT_EXEC */, Flags: 2 /* MAP_PRIVATE */, Filename: "//anon",
			Trailer: perfdata.Trailer{Pid: uint32(pid), Tid: uint32(pid), Time: at}}
		if events.ids != nil {
			rec.Trailer.ID = events.ids[0]
		}
		if err := w.Synthesize(0, rec); err != nil {
			return err
		}
	}
	si := 0
	for src.Next() {
		switch rec := src.Record().(type) {
		case *perfdata.Sample:
			if si >= len(stacks) {
				return fmt.Errorf("%s: more samples than were read", *in.input)
			}
			smp := injectedSample(rec, stacks[si], names[int(rec.Pid)])
			event := events.of(stacks[si])
			if events.ids != nil {
				smp.ID = events.ids[event]
			}
			if err := w.Synthesize(event, smp); err != nil {
				return fmt.Errorf("%s: %w", *out, err)
			}
			si++
		case *perfdata.Comm, *perfdata.Mmap, *perfdata.Mmap2, *perfdata.Fork, *perfdata.Exit, *perfdata.Lost:
			var err error
			if events.ids == nil {
				err = w.WriteRecord(src.Raw())
			} else {
				// Their sample_id trailers gain the first event's id.
				setTrailerID(rec, events.ids[0])
				err = w.Synthesize(0, rec)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", *out, err)
			}
		}
	}
	if err := src.Err(); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", *out, err)
	}
	return dst.Commit()
}

// injectedEvents are the events of an injected perf.data: the
// recording's, and for its allocation samples (record --alloc) a second,
// ruby-alloc, whose samples' period is the objects they stand for, so that
// perf reports them apart from CPU time. ids are the events' sample ids
// when there are two (nil: one).
type injectedEvents struct {
	ids []uint64
}

// of is the index of the event of stack s's sample.
func (e injectedEvents) of(s merge.Stack) int {
	if s.Alloc && len(e.ids) > 1 {
		return 1
	}
	return 0
}

// allocEventName is the event perf reports allocation samples under.
const allocEventName = "ruby-alloc"

// injectEvents adds to w the event attr named name, and, when any of
// stacks is an allocation sample, the ruby-alloc event beside it.
func injectEvents(w *perfdata.Writer, attr perfdata.Attr, name string, stacks []merge.Stack) (injectedEvents, error) {
	alloc := slices.ContainsFunc(stacks, func(s merge.Stack) bool { return s.Alloc })
	if !alloc {
		return injectedEvents{}, w.AddEvent(attr, name, nil)
	}
	// Two events: each sample and each record's trailer says whose.
	attr.SampleType |= perfdata.SampleIdentifier
	allocAttr := attr
	allocAttr.Flags &^= perfdata.FlagFreq
	allocAttr.SamplePeriodOrFreq = 1
	e := injectedEvents{ids: []uint64{1, 2}}
	if err := w.AddEvent(attr, name, e.ids[:1]); err != nil {
		return e, err
	}
	return e, w.AddEvent(allocAttr, allocEventName, e.ids[1:])
}

// setTrailerID sets the id in a side-band record's sample_id trailer.
func setTrailerID(rec perfdata.Record, id uint64) {
	switch r := rec.(type) {
	case *perfdata.Comm:
		r.Trailer.ID = id
	case *perfdata.Mmap:
		r.Trailer.ID = id
	case *perfdata.Mmap2:
		r.Trailer.ID = id
	case *perfdata.Fork:
		r.Trailer.ID = id
	case *perfdata.Exit:
		r.Trailer.ID = id
	case *perfdata.Lost:
		r.Trailer.ID = id
	}
}

// recordablePID: pid can be a Ruby a recording sampled. rubyperf samples
// with the pids of the initial pid namespace, where 1 is init, never a Ruby
// it attached to.
func recordablePID(pid int) bool { return pid >= 2 && pid <= maxPID }

// leftOut counts the frame names a perf map cannot hold, with one example
// and why.
type leftOut struct {
	n       int
	example string
	why     error
}

// mapEntries lays out a process's Ruby frame names (the keys of byName) for
// its perf map, sorted, each rubyFrameSize bytes from offset 0, under the
// name every text output gives it (export.Printable: a name holding a
// newline would otherwise end its line early). A name perf could still not
// read back (shorter than 3 bytes, or too long) is left out and counted:
// only its frames go unnamed. list[i] is the frame name entries[i] stands
// for.
func mapEntries(byName map[string]uint64) (list []string, entries []perfmap.Entry, left leftOut) {
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		name := export.Printable(n)
		if err := perfmap.CheckName(name); err != nil {
			if left.n == 0 {
				left.example, left.why = n, err
			}
			left.n++
			continue
		}
		entries = append(entries, perfmap.Entry{Start: uint64(len(list)) * rubyFrameSize, Size: rubyFrameSize, Name: name})
		list = append(list, n)
	}
	return list, entries, left
}

// synthetic: frames of this kind have no address of their own, so perf
// reads their names from the synthetic addresses in /tmp/perf-PID.map:
// Ruby frames, C methods, and pseudo-frames of thread states and labels.
func synthetic(k merge.Kind) bool {
	return k == merge.KindRuby || k == merge.KindCFunc || k == merge.KindState || k == merge.KindLabel
}

// injectedSample is s with its merged stack as the callchain.
func injectedSample(orig *perfdata.Sample, s merge.Stack, names map[string]uint64) *perfdata.Sample {
	out := &perfdata.Sample{Misc: orig.Misc, Pid: orig.Pid, Tid: orig.Tid, Time: orig.Time, CPU: orig.CPU,
		Period: orig.Period}
	ctx := uint64(0)
	for _, f := range s.Frames {
		want := perfdata.ContextUser
		if f.Kind == merge.KindKernel {
			want = perfdata.ContextKernel
		}
		if want != ctx {
			out.Callchain = append(out.Callchain, want)
			ctx = want
		}
		addr := f.Addr
		if synthetic(f.Kind) {
			addr = names[f.Name]
		}
		out.Callchain = append(out.Callchain, addr)
		if out.IP == 0 {
			out.IP = addr
		}
	}
	return out
}
