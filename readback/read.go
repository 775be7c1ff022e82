package readback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/internal/safefile"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// ReadOptions tune how a recording is read.
type ReadOptions struct {
	Merge merge.Options
	// NativeOnly gives each sample's native frames alone, as unwound, with
	// nothing merged or hidden (for comparing with other unwinders).
	NativeOnly bool
	// Debuginfo finds the debug files that name stripped objects' functions
	// (debuginfod, --debug-file); nil: the local filesystem only.
	Debuginfo *debuginfo.Finder
	// Warn, when set, gets a line, once the whole recording has been read,
	// about a recording that was not finished, one about each symbol table
	// in it that could not be read (its frames show unnamed), and one for
	// each mapped file refused (RefusedWarner).
	Warn io.Writer
	// Kind says which samples to read: CPU samples (with off-CPU ones), or
	// allocation samples, or all. KindAuto reads the CPU samples of a
	// recording that took any, else its allocation samples; ReadStats.Kind
	// says which.
	Kind SampleKind
}

// SampleKind is a kind of sample a recording holds.
type SampleKind int

const (
	KindAuto  SampleKind = iota
	KindCPU              // cpu-clock samples, and off-CPU ones (record --wall)
	KindAlloc            // allocation samples (record --alloc)
	KindAll              // every sample, in the file's order (Stack.Alloc tells them apart)
)

// ReadStats count what reading found.
type ReadStats struct {
	Samples int
	// Unfinished: the recording has no feature sections, as a finished one
	// has (its recorder was killed); SymbolsFrom is where its Ruby names
	// came from then, "" when nowhere.
	Unfinished  bool
	SymbolsFrom string
	Fallbacks   int // samples whose Ruby and native stacks could not be interleaved
	Incomplete  int // samples whose native unwinding stopped early (merge.IncompleteName)
	// TableUnwound counts samples whose native frames the program unwound
	// with the unwind tables (record --unwind tables or both).
	TableUnwound int
	Truncated    int // samples whose Ruby stack was cut at payload.MaxFrames (merge.TruncatedName)
	NoPayload    int // samples without a readable Ruby payload (native only)
	// NotNamed counts Ruby frames named only for other samples (ReplacedLabel).
	NotNamed int
	// Unknown counts Ruby frames that could not be read ([unknown]).
	Unknown int
	// SamplesNotNamed counts the samples with a Ruby frame of either kind.
	SamplesNotNamed int
	// Start is when sampling started (wall clock), zero when the recording
	// does not say (one made before rubyperf kept it, or not finished).
	Start time.Time
	// Kind is the kind of samples read (never KindAuto); Kinds, the
	// FeatureSampleKinds bits of the recording (KindsCPU when it does not
	// say).
	Kind  SampleKind
	Kinds uint32
	// Other counts the samples of the other kind, not read.
	Other int
	// Live is what the recording says of the allocated objects it
	// followed (record --alloc --live), nil when it followed none.
	Live *LiveCounts
}

// interpFrames are libruby's interpreter plumbing between a C method and
// the VM entry it makes (merge.Native.Plumbing).
var interpFrames = map[string]bool{
	"vm_exec_core": true, "vm_call_cfunc": true, "vm_call_cfunc_with_frame": true,
	"vm_call_cfunc_with_frame_": true, "vm_call0_body": true, "vm_call0_cfunc_with_frame": true,
	"vm_call0_cfunc": true, "vm_sendish": true, "vm_invoke_block": true, "vm_invoke_iseq_block": true,
	"invoke_block_from_c_bh": true, "invoke_iseq_block_from_c": true, "invoke_block": true,
	"vm_yield_with_cfunc": true, "vm_yield": true, "vm_yield_with_block": true, "rb_vm_invoke_proc": true,
	"invoke_bmethod": true, "vm_call_bmethod_body": true, "jit_exec": true, "vm_call_method": true,
	"vm_call_method_each_type": true, "vm_call_general": true, "vm_call_iseq_setup": true,
}

// fileExists says whether path names something (it may not be readable).
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// threadStarts are the native functions at the bottom of every thread, and
// of every fiber's stack (libruby's fiber_entry, entered from a coroutine
// switch that leaves no caller to unwind to).
var threadStarts = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_call_main": true, "start_thread": true,
	"clone": true, "clone3": true, "__clone": true, "__clone3": true, "fiber_entry": true,
}

// ReadStacks reads the recording at path and hands fn every sample as a
// merged stack, in file order. The stack's Frames are valid until fn
// returns (they are reused for the next sample): clone them to keep them.
func ReadStacks(path string, opts ReadOptions, fn func(merge.Stack) error) (*ReadStats, error) {
	r, err := perfdata.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	table := symtab.New()
	var stats ReadStats
	// What could not be read is told once the rest has been: a recording
	// that then fails to read is told in one line, its error.
	var warnings []string
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	if b, ok := r.Feature(perfdata.Feature(FeatureRubySymbols)); ok {
		// A table that cannot be read costs the Ruby names, not the samples.
		if t, err := symtab.Decode(b); err == nil {
			table = t
		} else {
			warn("%s: %v: Ruby frames show as %s", path, err, rubystack.UnknownLabel)
		}
	} else if unfinished := len(r.Features()) == 0; unfinished || fileExists(SymbolsPath(path)) {
		// No feature section at all, where a finished file has a dozen
		// (perf's or ours): its recorder died after a checkpoint, which
		// left the Ruby names beside it. Or a full disk left no room for
		// them in the file, and the copy stayed.
		stats.Unfinished = unfinished
		names := "no readable " + SymbolsPath(path)
		// Its names are trusted only from the recording's own owner: a
		// neighbour may plant one beside it in a shared directory.
		owner := -1
		if st, err := os.Stat(path); err == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				owner = int(sys.Uid)
			}
		}
		b, err := safefile.ReadOwned(SymbolsPath(path), symtab.MaxBytes, owner)
		if err == nil {
			var t *symtab.Table
			if t, err = symtab.Decode(b); err == nil {
				table, stats.SymbolsFrom = t, SymbolsPath(path)
				names = "Ruby names from " + stats.SymbolsFrom
			} else {
				err = fmt.Errorf("%s: %w", SymbolsPath(path), err)
			}
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			names = err.Error()
		}
		if stats.SymbolsFrom == "" {
			names += ": Ruby frames show as " + rubystack.UnknownLabel
		}
		if unfinished {
			warn("%s: not finished (its recorder was killed?): the samples up to its last checkpoint; %s", path, names)
		} else {
			warn("%s: its Ruby names are not in it (was the disk full?); %s as of its last checkpoint", path, names)
		}
	}
	stats.Kinds, stats.Kind = KindsCPU, opts.Kind
	if b, ok := r.Feature(perfdata.Feature(FeatureSampleKinds)); ok && len(b) == 4 {
		stats.Kinds = binary.LittleEndian.Uint32(b)
	}
	if stats.Kind == KindAuto {
		stats.Kind = KindCPU
		if stats.Kinds&KindsCPU == 0 && stats.Kinds&KindsAlloc != 0 {
			stats.Kind = KindAlloc
		}
	}
	if b, ok := r.Feature(perfdata.Feature(FeatureStartTime)); ok && len(b) == 8 {
		if ns := binary.LittleEndian.Uint64(b); ns > 0 && ns < math.MaxInt64 {
			stats.Start = time.Unix(0, int64(ns))
		}
	}
	var alive map[payload.AllocKey]bool
	if b, ok := r.Feature(perfdata.Feature(FeatureAllocLive)); ok {
		if counts, keys, err := decodeAllocLive(b); err == nil {
			stats.Live, alive = &counts, keys
		} else {
			warn("%s: %v: which objects were alive is not known", path, err)
		}
	}
	var kernel *native.Kernel
	if b, ok := r.Feature(perfdata.Feature(FeatureKallsyms)); ok {
		if kernel, err = decodeKallsyms(b); err != nil {
			warn("%s: %v: kernel frames show as %s", path, err, rubystack.UnknownLabel)
		}
	}
	rd := NewReader(opts, table, kernel, &native.Objects{Load: native.LoadOptions{Debuginfo: opts.Debuginfo}, Refused: RefusedWarner(opts.Warn)})
	rd.stats, rd.alive = stats, alive
	// Records come from per-CPU rings: a thread's COMM or a library's MMAP2
	// may sit in the file after samples that need it. Like perf, apply them
	// by time: collect them first, then replay them up to each sample's time.
	side, err := sideBand(path)
	if err != nil {
		return nil, err
	}
	r.Only(perfdata.RecordSample)
	r.ReuseBuffer() // a sample is done with before the next is read
	next := 0
	for r.Next() {
		switch rec := r.Record().(type) {
		case *perfdata.Sample:
			for next < len(side) && side[next].time <= rec.Time {
				rd.Apply(side[next].rec)
				next++
			}
			before := rd.stats
			st := rd.Stack(rec, nil) // (a compact payload must be expanded in order)
			if rd.stats.Kind != KindAll && st.Alloc != (rd.stats.Kind == KindAlloc) {
				rd.stats = before // counts are of the samples read
				rd.stats.Other++
				continue
			}
			if err := fn(st); err != nil {
				return &rd.stats, err
			}
		}
	}
	if err := r.Err(); err != nil {
		return &rd.stats, err
	}
	if opts.Warn != nil {
		for _, w := range warnings {
			fmt.Fprintf(opts.Warn, "rubyperf: %s\n", w)
		}
	}
	return &rd.stats, nil
}

// timed is a side-band record and its time.
type timed struct {
	time uint64
	rec  perfdata.Record
}

// sideBand reads the COMM, MMAP, MMAP2 and FORK records of a file, sorted by
// time (file order among equal times).
func sideBand(path string) ([]timed, error) {
	r, err := perfdata.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	r.Only(perfdata.RecordComm, perfdata.RecordMmap, perfdata.RecordMmap2, perfdata.RecordFork)
	var out []timed
	for r.Next() {
		switch rec := r.Record().(type) {
		case *perfdata.Comm:
			out = append(out, timed{rec.Trailer.Time, rec})
		case *perfdata.Mmap:
			out = append(out, timed{rec.Trailer.Time, rec})
		case *perfdata.Mmap2:
			out = append(out, timed{rec.Trailer.Time, rec})
		case *perfdata.Fork:
			out = append(out, timed{rec.Time, rec})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].time < out[j].time })
	return out, r.Err()
}

// Apply takes one side-band record (COMM, MMAP, MMAP2, FORK) into the
// processes' state.
func (rd *Reader) Apply(rec perfdata.Record) {
	switch rec := rec.(type) {
	case *perfdata.Mmap2:
		rd.mapsOf(rec.Pid).Add(native.Mapping{Start: rec.Addr, Limit: rec.Addr + rec.Len, Offset: rec.Pgoff,
			Path: rec.Filename, Exec: rec.Prot&4 != 0})
	case *perfdata.Mmap:
		rd.mapsOf(rec.Pid).Add(native.Mapping{Start: rec.Addr, Limit: rec.Addr + rec.Len, Offset: rec.Pgoff,
			Path: rec.Filename, Exec: rec.Misc&perfdata.MiscMmapData == 0})
	case *perfdata.Comm:
		rd.comms[rec.Tid] = rec.Comm
		if rec.Misc&perfdata.MiscCommExec != 0 {
			delete(rd.maps, rec.Pid) // a new image: the old mappings are gone
		}
	case *perfdata.Fork:
		// A new thread (or process) has its creator's name until it sets
		// one (a COMM record), as the kernel copies it at clone.
		if _, named := rd.comms[rec.Tid]; !named {
			if c, ok := rd.comms[rec.PTid]; ok {
				rd.comms[rec.Tid] = c
			}
		}
		if rec.Pid != rec.PPid { // a new process starts with its parent's mappings
			if parent, ok := rd.maps[rec.PPid]; ok {
				rd.maps[rec.Pid] = parent.Clone()
			}
		}
	}
}

// threadName is what thread tid of process pid is called: its own name,
// or, before any record named it (a sample can come before its thread's
// FORK record: they come from different rings), its process's, which a
// thread has at clone unless its creator had renamed itself.
func (rd *Reader) threadName(pid, tid uint32) string {
	if tid == exitedTID {
		return "" // some exiting thread: not the process's name
	}
	if c, ok := rd.comms[tid]; ok {
		return c
	}
	return rd.comms[pid]
}

// exitedTID is the thread id the kernel writes into a sample taken as its
// thread exits, once the thread's pid is detached (perf_event_pid_type).
const exitedTID = ^uint32(0)

// Reader merges a recording's samples one at a time, as they are read:
// the side-band records taken so far (Apply) say what each process maps
// and each thread is called; the symbol table names the Ruby frames, and
// the kernel's symbols the kernel frames. ReadStacks reads a file through
// one; a live recording reads its records through another as they come.
type Reader struct {
	opts   ReadOptions
	symtab *symtab.Table
	kernel *native.Kernel
	maps   map[uint32]*native.Maps
	comms  map[uint32]string
	objs   *native.Objects
	stats  ReadStats
	alive  map[payload.AllocKey]bool // FeatureAllocLive's samples
	// ObjectsOf, when set, gives the files a process maps, as it sees them
	// (a live recording's processes may be in containers); else the
	// Reader's own.
	ObjectsOf func(pid uint32) *native.Objects
	// tree holds the frames of the file's samples read so far, which its
	// compact samples refer to: every sample is read, in file order.
	tree payload.TreeDecoder

	// Buffers reused from one sample to the next.
	payload payload.Payload
	natives []merge.Native
	labels  []merge.Label
	unwound []native.Frame
	rubies  []merge.Ruby
	merger  merge.Merger
}

// NewReader returns a Reader naming Ruby frames through table, kernel
// frames through kernel (nil: none), and native frames through the files
// objs loads (unless ObjectsOf says otherwise).
func NewReader(opts ReadOptions, table *symtab.Table, kernel *native.Kernel, objs *native.Objects) *Reader {
	return &Reader{opts: opts, symtab: table, kernel: kernel, maps: map[uint32]*native.Maps{},
		comms: map[uint32]string{}, objs: objs}
}

// ForgetThread drops what the Reader knows of thread tid (its name).
func (rd *Reader) ForgetThread(tid uint32) { delete(rd.comms, tid) }

// ForgetProcess drops what the Reader knows of process pid (its mappings).
func (rd *Reader) ForgetProcess(pid uint32) { delete(rd.maps, pid) }

// objects is where the files pid maps are loaded from.
func (rd *Reader) objects(pid uint32) *native.Objects {
	if rd.ObjectsOf != nil {
		return rd.ObjectsOf(pid)
	}
	return rd.objs
}

// maxRefusedLines bounds the lines refusedWarner writes: a neighbour may
// plant a FIFO at every path a process maps.
const maxRefusedLines = 16

// RefusedWarner tells w, one line each, of the mapped files that were not
// read because something other than a regular file is at their path now (a
// FIFO put there after the recording, say): those frames go unnamed. Nil
// when w is.
func RefusedWarner(w io.Writer) func(error) {
	if w == nil {
		return nil
	}
	n := 0
	return func(err error) {
		switch n++; {
		case n <= maxRefusedLines:
			fmt.Fprintf(w, "rubyperf: %v: its frames are not named\n", err)
		case n == maxRefusedLines+1:
			fmt.Fprintf(w, "rubyperf: more mapped files are not regular files; their frames are not named\n")
		}
	}
}

func (rd *Reader) mapsOf(pid uint32) *native.Maps {
	m, ok := rd.maps[pid]
	if !ok {
		m = &native.Maps{}
		rd.maps[pid] = m
	}
	return m
}

// Stack merges sample s, and counts it; p is its payload, decoded (and
// named) by a live recording, or nil: decoded here from s.Raw. The stack's
// Frames are valid until the next call.
func (rd *Reader) Stack(s *perfdata.Sample, p *payload.Payload) merge.Stack {
	st := rd.stack(s, p)
	rd.stats.Samples++
	return st
}

// stack merges sample s; p is its payload, decoded (and named) by a live
// recording, or nil: decoded here from s.Raw.
func (rd *Reader) stack(s *perfdata.Sample, p *payload.Payload) merge.Stack {
	st := merge.Stack{PID: int(s.Pid), TID: int(s.Tid), Comm: rd.threadName(s.Pid, s.Tid), Time: s.Time, CPU: s.CPU, Period: s.Period}
	var perr error
	if p == nil {
		p = &rd.payload
		var raw []byte
		if raw, perr = rd.tree.Expand(s.Raw); perr == nil {
			perr = payload.DecodeInto(p, raw)
		}
	}
	im := symtab.Image{PID: s.Pid}
	if perr == nil {
		im.Gen = p.Gen
		if s.Tid == exitedTID && p.PID == s.Pid && p.TID != exitedTID {
			// The kernel gives -1 for the thread of a sample taken as
			// it exits (its pid is already detached); the payload's
			// thread, the BPF program's, is still the thread's own.
			st.TID, st.Comm = int(p.TID), rd.threadName(s.Pid, p.TID)
		}
	}
	rd.natives = rd.kernelFrames(rd.natives[:0], s.Callchain)
	if perr == nil && p.Flags&payload.Alloc != 0 {
		st.Alloc, st.Period, st.AllocBytes = true, p.Period, p.AllocBytes
		st.Alive = rd.alive[payload.AllocKey{PID: p.PID, TID: p.TID, Window: p.AllocWindow, Seq: p.AllocSeq, Slot: p.AllocSlot}]
		st.Object = merge.AllocObject{TID: p.TID, Window: p.AllocWindow, Seq: p.AllocSeq, Slot: p.AllocSlot}
	}
	if perr == nil && p.Thread.OffCPU {
		st.OffCPU = true
		n := 0
		for n < len(rd.natives) && rd.natives[n].Kind == merge.KindKernel && tracingFrame(rd.natives[n].Name) {
			n++
		}
		rd.natives = append(rd.natives[:0], rd.natives[n:]...)
	}
	var pp *payload.Payload
	if perr == nil {
		pp = p
	}
	rd.natives = rd.userFrames(rd.natives, s, pp, im)
	if rd.opts.NativeOnly {
		for _, n := range rd.natives {
			st.Frames = append(st.Frames, n.Frame)
		}
		return st
	}
	rd.rubies = rd.rubies[:0]
	if perr == nil {
		unnamed := false
		for _, f := range p.Frames {
			r := rd.rubyFrame(p, f)
			switch {
			case r.Hidden:
			case r.Name == rubystack.UnknownLabel:
				rd.stats.Unknown++
				unnamed = true
			case r.Name == symtab.ReplacedLabel:
				rd.stats.NotNamed++
				unnamed = true
			}
			rd.rubies = append(rd.rubies, r)
		}
		if unnamed {
			rd.stats.SamplesNotNamed++
		}
	} else {
		rd.stats.NoPayload++
	}
	var how merge.Outcome
	st.Frames, how = rd.merger.Merge(rd.natives, rd.rubies, rd.opts.Merge)
	st.Fallback, st.Incomplete = how.Fallback, how.Incomplete
	if perr == nil && p.Flags&payload.Truncated != 0 {
		st.Frames, st.Incomplete, st.Truncated = merge.Truncate(st.Frames), false, true
		rd.stats.Truncated++
	}
	if st.Alloc {
		st.Frames = rd.outsideAllocator(st.Frames, im)
	}
	if perr == nil && p.Flags&(payload.NoEC|payload.ReadError|payload.BadCFP) == 0 {
		topC := false
		for _, r := range rd.rubies {
			if !r.Hidden {
				topC = r.Kind == merge.KindCFunc
				break
			}
		}
		st.State = threadState(p.Thread, topC)
		merge.AddStateFrames(&st, p.Thread.GCPhase.String())
	}
	if perr == nil && len(p.Labels) > 0 {
		rd.labels = rd.labelsOf(p, rd.labels)
		st.Labels = rd.labels
	}
	if perr == nil && p.Flags&payload.Alloc != 0 && p.Flags&payload.AllocClassed != 0 {
		// The allocated object's class rides as a label: pprof shows it
		// as one, and flame graphs split by it (--group-by object.class).
		name := UnknownLabelValue
		if n, _, ok := rd.symtab.FrameName(p.AllocClass); ok {
			name = n.Label
		}
		rd.labels = append(rd.labels[:len(st.Labels)], merge.Label{Key: merge.ClassLabel, Value: name})
		st.Labels = rd.labels
	}
	if st.Fallback {
		rd.stats.Fallbacks++
	}
	if st.Incomplete {
		rd.stats.Incomplete++
	}
	return st
}

// outsideAllocator drops from an allocation sample's frames (leaf first)
// the native frames of the Ruby VM's own file at the leaf: the allocator's
// insides, the same in every sample. The leaf is then what allocated: a C
// method of Ruby's (String#upcase), or an extension's function.
func (rd *Reader) outsideAllocator(frames []merge.Frame, im symtab.Image) []merge.Frame {
	vm, ok := rd.symtab.VMExec[im]
	if !ok || vm.Path == "" {
		return frames
	}
	n := 0
	for n < len(frames)-1 && frames[n].Kind == merge.KindNative && frames[n].File == vm.Path {
		n++
	}
	return frames[n:]
}

// kernelFrames names the kernel part of a callchain (the user part is
// unwound from the stack copy).
func (rd *Reader) kernelFrames(out []merge.Native, chain []uint64) []merge.Native {
	for ip := range perfdata.CallchainIn(chain, perfdata.ContextKernel) {
		f := merge.Frame{Kind: merge.KindKernel, Name: rubystack.UnknownLabel, File: "[kernel.kallsyms]", Addr: ip}
		if name, off, ok := rd.kernel.Symbol(ip); ok {
			f.Name, f.SymOffset = name, off
		}
		out = append(out, merge.Native{Frame: f})
	}
	return out
}

// userFrames describes a sample's native user frames: those the program
// unwound with the unwind tables (p's Natives, nil p: none), or those
// unwound here from its stack copy, whichever reach further; the copy is
// unwound only when the program's walk ended short of the thread's first
// frame (JIT code, no call frame information).
func (rd *Reader) userFrames(out []merge.Native, s *perfdata.Sample, p *payload.Payload, im symtab.Image) []merge.Native {
	maps, ok := rd.maps[s.Pid]
	if !ok {
		return out
	}
	objs := rd.objects(s.Pid)
	copied := len(s.RegsUser) > 0 && len(s.StackUser) > 0
	rd.unwound = rd.unwound[:0]
	if p != nil && len(p.Natives) > 0 {
		rd.unwound = native.FramesAt(rd.unwound, p.Natives, maps, objs)
		rd.stats.TableUnwound++
	}
	if copied && (p == nil || len(p.Natives) == 0 || p.NativeStop != payload.NativeOutermost) {
		tables := len(rd.unwound)
		rd.unwound = native.Unwind(rd.unwound, s.RegsUser, s.StackUser, maps, objs)
		if fromCopy := len(rd.unwound) - tables; fromCopy > tables {
			rd.unwound = append(rd.unwound[:0], rd.unwound[tables:]...)
		} else {
			rd.unwound = rd.unwound[:tables]
		}
	}
	if len(rd.unwound) == 0 && !copied {
		return rd.callchainUserFrames(out, s.Callchain, maps, objs)
	}
	vm, hasVM := rd.symtab.VMExec[im]
	for i, f := range rd.unwound {
		// A caller's frame is shown inside its call instruction (the return
		// address - 1), as perf does: a call that ends a function would
		// otherwise be named after the next one.
		addr, vaddr := f.PC, f.VAddr
		if i > 0 {
			addr, vaddr = addr-1, vaddr-1
		}
		fr := merge.Frame{Kind: merge.KindNative, Name: rubystack.UnknownLabel, File: f.Mapping.Path, Addr: addr,
			MapStart: f.Mapping.Start, MapLimit: f.Mapping.Limit, MapOffset: f.Mapping.Offset}
		n := merge.Native{JIT: f.JIT}
		if f.Object != nil {
			fr.BuildID = f.Object.BuildID()
			if name, off, ok := f.Object.Symbol(vaddr); ok {
				fr.Name, fr.SymOffset = name, off
				base := compilerClone(name)
				n.VMEntry = base == "rb_vm_exec"
				n.Plumbing = interpFrames[base] || strings.HasPrefix(base, "vm_call_")
				n.ThreadStart = threadStarts[base]
			}
		}
		n.Interpreter = hasVM && f.Mapping.Path == vm.Path
		if n.Interpreter && vaddr >= vm.Start && vaddr < vm.End {
			n.VMEntry = true
			if fr.Name == rubystack.UnknownLabel {
				fr.Name = "rb_vm_exec"
			}
		}
		n.Frame = fr
		out = append(out, n)
	}
	return out
}

func (rd *Reader) rubyFrame(p *payload.Payload, f payload.Frame) merge.Ruby {
	r := merge.Ruby{Finish: f.Finish}
	var info symtab.FrameInfo
	var named, ok bool
	if p.Flags&payload.Named != 0 {
		// The recorder decided the frame's name when it read the sample,
		// walking on where the program left a long environment chain
		// (f.Error with f.Env): the id alone says.
		info, named, ok = rd.symtab.FrameName(f.Iseq)
	} else {
		info, named, ok = rd.symtab.Lookup(symtab.Key(p.PID, p.Gen, f), p.GC)
		named = named && !f.Error
	}
	switch {
	case !named:
		r.Frame = merge.Frame{Kind: merge.KindRuby, Name: rubystack.UnknownLabel}
	case !ok:
		// Named only for other GC intervals: the code there may have been
		// freed and replaced since.
		r.Frame = merge.Frame{Kind: merge.KindRuby, Name: symtab.ReplacedLabel}
	case info.Drop:
		r.Hidden = true
	default:
		kind := merge.KindRuby
		if info.CFunc {
			kind = merge.KindCFunc
		}
		r.Frame = merge.Frame{Kind: kind, Name: info.Label, File: info.Path, Line: info.Line}
	}
	return r
}

// compilerClone strips the suffixes GCC gives function clones
// (vm_sendish.constprop.0, foo.isra.0, foo.part.0, foo.cold).
func compilerClone(name string) string {
	for _, suffix := range []string{".constprop.", ".isra.", ".part.", ".cold"} {
		if i := strings.Index(name, suffix); i > 0 {
			name = name[:i]
		}
	}
	return name
}

// callchainUserFrames names the user part of a callchain: what there is of
// a native stack when a sample has no stack copy (perf record -g, or frame
// pointers).
func (rd *Reader) callchainUserFrames(out []merge.Native, chain []uint64, maps *native.Maps, objs *native.Objects) []merge.Native {
	for ip := range perfdata.CallchainIn(chain, perfdata.ContextUser) {
		fr := merge.Frame{Kind: merge.KindNative, Name: rubystack.UnknownLabel, Addr: ip}
		if m, ok := maps.Find(ip); ok {
			fr.File, fr.MapStart, fr.MapLimit, fr.MapOffset = m.Path, m.Start, m.Limit, m.Offset
			if m.Path != "" && m.Path[0] == '/' || m.Path == native.VDSOPath {
				o := objs.Get(m.Path)
				fr.BuildID = o.BuildID()
				if name, off, ok := o.Symbol(o.VAddr(ip - m.Start + m.Offset)); ok {
					fr.Name, fr.SymOffset = name, off
				}
			}
		}
		out = append(out, merge.Native{Frame: fr})
	}
	return out
}
