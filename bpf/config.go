package bpf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// ProcessConfig is what the BPF walker needs to know about one Ruby process,
// converted from its rubybuild.Layout: the C struct proc_config.
type ProcessConfig = rubyProcConfig

// ConfigFor converts a Layout and the thread-pointer offset of
// ruby_current_ec into the program's per-process configuration.
func ConfigFor(l *rubybuild.Layout, ecTPOffset int64) (ProcessConfig, error) {
	c := l.Constants
	cfg := ProcessConfig{
		EcTpOffset:  ecTPOffset,
		CfpSize:     u32(l.ControlFrame.Size),
		CfpPc:       u32(l.ControlFrame.PC),
		CfpIseq:     u32(l.ControlFrame.Iseq),
		CfpEp:       u32(l.ControlFrame.EP),
		FrameCframe: uint64(c["VM_FRAME_FLAG_CFRAME"]),
		FrameFinish: uint64(c["VM_FRAME_FLAG_FINISH"]),
		EnvLocal:    uint64(c["VM_ENV_FLAG_LOCAL"]),
		T_mask:      uint64(c["RUBY_T_MASK"]),
		T_imemo:     uint64(c["RUBY_T_IMEMO"]),
		FlUshift:    uint64(c["RUBY_FL_USHIFT"]),
		Qnil:        uint64(c["RUBY_Qnil"]),
		ImmMask:     uint64(c["RUBY_IMMEDIATE_MASK"]),
		ImemoMent:   uint64(c["imemo_ment"]),
		FlPromoted:  uint64(c["RUBY_FL_PROMOTED"]),
		EnvEscaped:  uint64(c["VM_ENV_FLAG_ESCAPED"]),
		ImemoSvar:   uint64(c["imemo_svar"]),
	}
	if l.Capabilities.SkipDummyBottomFrame {
		cfg.SkipDummyFrame = 1
	}
	// A label's String value: its bytes outside the object, and how many.
	cfg.T_string = uint64(c["RUBY_T_STRING"])
	cfg.StrNoembed = uint64(c["RSTRING_NOEMBED"])
	heapLen := l.String.HeapLen
	if l.Capabilities.StringLenField {
		heapLen = l.String.Len
	}
	if p := l.String.HeapPtr; p > 0 && p%8 == 0 && p+8 <= labelObj && heapLen > 0 && heapLen%8 == 0 && heapLen+8 <= labelObj {
		cfg.StrHeapPtr, cfg.StrHeapLen = u32(p), u32(heapLen)
	}
	if o := l.SVar.CrefOrMe; o >= 0 && o%8 == 0 && o < 64 && c["imemo_svar"] != 0 {
		cfg.SvarCrefOrMe = u32(o) + 1
	}
	if l.ControlFrame.JITReturn >= 0 {
		cfg.CfpJitReturn = u32(l.ControlFrame.JITReturn) + 1
	}
	// The program reads the execution context's fields in one read of at
	// most EC_SPAN bytes, and picks them by offset from its start.
	const ecSpan = 64
	ec := l.ExecutionContext
	start := min(ec.VMStack, ec.VMStackSize, ec.CFP)
	end := max(ec.VMStack, ec.VMStackSize, ec.CFP) + 8
	if start < 0 || start%8 != 0 || end-start > ecSpan || (ec.VMStack|ec.VMStackSize|ec.CFP)%8 != 0 {
		return cfg, fmt.Errorf("execution context fields at %d, %d and %d do not fit the BPF walker's %d-byte read",
			ec.VMStack, ec.VMStackSize, ec.CFP, ecSpan)
	}
	// ec->thread_ptr, for what the thread was doing, when the same read
	// can take it.
	if t := ec.ThreadPtr; t >= 0 && t%8 == 0 && max(end, t+8)-min(start, t) <= ecSpan {
		start, end = min(start, t), max(end, t+8)
		cfg.EcThread = u32(t-start) + 1
	}
	cfg.EcStart, cfg.EcSpan = u32(start), u32(end-start)
	cfg.EcVmStack, cfg.EcVmStackSize, cfg.EcCfp = u32(ec.VMStack-start), u32(ec.VMStackSize-start), u32(ec.CFP-start)
	threadState(&cfg, l)
	// The program reads control frames CFP_CHUNK at a time, each at most
	// CFP_READ bytes, and picks fields by offset: frames stay 8-aligned one
	// after another and each field lies inside its frame.
	const cfpRead = 64
	if size := l.ControlFrame.Size; size <= 0 || size > cfpRead || size%8 != 0 {
		return cfg, fmt.Errorf("control frames of %d bytes do not fit the BPF walker", size)
	}
	offs := []int64{l.ControlFrame.PC, l.ControlFrame.Iseq, l.ControlFrame.EP}
	if o := l.SVar.CrefOrMe; o >= 0 && o%8 == 0 && o < 64 && c["imemo_svar"] != 0 {
		cfg.SvarCrefOrMe = u32(o) + 1
	}
	if l.ControlFrame.JITReturn >= 0 {
		offs = append(offs, l.ControlFrame.JITReturn)
	}
	for _, off := range offs {
		if off < 0 || off+8 > l.ControlFrame.Size || off%8 != 0 {
			return cfg, fmt.Errorf("control frame field at %d does not fit the BPF walker's %d-byte frames", off, l.ControlFrame.Size)
		}
	}
	return cfg, nil
}

func u32(v int64) uint32 {
	if v < 0 {
		return 0
	}
	return uint32(v)
}

// gcSpan is GC_SPAN in ruby.bpf.c: the most bytes of the objspace the
// program reads for a sample's GC stamp.
const gcSpan = 2048

// StampGC makes the program stamp every sample with the GC's progress,
// read from the objspace at address objspace (vm->objspace of the live
// process) at the Layout's offsets. It refuses offsets the program's one
// read cannot serve, leaving the configuration without stamps.
func (cfg *ProcessConfig) StampGC(l *rubybuild.Layout, objspace uint64) error {
	if !l.Capabilities.GCStamps {
		return errors.New("the layout has no GC counters")
	}
	if objspace == 0 {
		return errors.New("no objspace")
	}
	g := l.GC
	start, end := l.GCSpan()
	switch {
	case start < 0 || end-start > gcSpan:
		return fmt.Errorf("GC fields from %d to %d do not fit the program's %d-byte read", start, end, gcSpan)
	case g.Count%8 != 0 || g.LastMajorGC%8 != 0 || g.Mode.Offset%4 != 0:
		return fmt.Errorf("GC fields at %d, %d and %d are not where the program reads them", g.Count, g.LastMajorGC, g.Mode.Offset)
	}
	cfg.GcStart = objspace + uint64(start)
	cfg.GcSpan = u32(end - start)
	cfg.GcCount, cfg.GcEpoch, cfg.GcFlags = u32(g.Count-start), u32(g.LastMajorGC-start), u32(g.Mode.Offset-start)
	cfg.GcModeShift, cfg.GcModeMask = u32(g.Mode.BitOffset), u32(1<<g.Mode.BitSize-1)
	cfg.GcModeMarking = u32(l.Constants["gc_mode_marking"])
	cfg.GcCompactingShift = u32(g.Compacting.BitOffset)
	if l.Capabilities.GCPhase {
		cfg.GcRunningShift = u32(g.Running.BitOffset) + 1
		cfg.GcModeNone = u32(l.Constants["gc_mode_none"])
		if v, ok := l.Constants["gc_mode_compacting"]; ok {
			cfg.GcModeCompacting = u32(v) + 1
		}
	}
	return nil
}

// thSpan is TH_SPAN in ruby.bpf.c: the most bytes of a thread the program
// reads for its state.
const thSpan = 512

// threadState fills what the program reads of a thread's state: its
// Ractor's running_ec (the GVL holder) and its unblock.func (a blocking
// region), where the Layout has them and one read of a thread can take
// them. What does not fit is left out: samples then do not say it.
func threadState(cfg *ProcessConfig, l *rubybuild.Layout) {
	if cfg.EcThread == 0 {
		return
	}
	if r := l.Ractor.RunningEC; r >= 0 && r%8 == 0 {
		cfg.RactorRunningEc = u32(r) + 1
	}
	if o := l.Ractor.GVLOwner; o >= 0 && o%8 == 0 {
		cfg.RactorGvlOwner = u32(o) + 1
	}
	var offs []int64
	for _, o := range []int64{l.Thread.Ractor, l.Thread.UnblockFunc} {
		if o >= 0 && o%8 == 0 {
			offs = append(offs, o)
		}
	}
	if len(offs) == 0 {
		return
	}
	start, end := slices.Min(offs), slices.Max(offs)+8
	if end-start > thSpan {
		return
	}
	cfg.ThStart, cfg.ThSpan = u32(start), u32(end-start)
	if o := l.Thread.Ractor; o >= 0 && o%8 == 0 {
		cfg.ThRactor = u32(o-start) + 1
	}
	if o := l.Thread.UnblockFunc; o >= 0 && o%8 == 0 && l.Capabilities.BlockingRegion {
		cfg.ThUnblock = u32(o-start) + 1
	}
}

// SetMainRactor tells the program where the main Ractor is (vm->ractor.
// main_ractor of the live process), whose running_ec is the GVL holder's
// for threads whose own Ractor the Layout cannot find.
func (cfg *ProcessConfig) SetMainRactor(addr uint64) { cfg.MainRactor = addr }

// HasThreadState says whether samples say if their thread held the GVL.
func (cfg *ProcessConfig) HasThreadState() bool {
	return cfg.EcThread != 0 && cfg.RactorRunningEc != 0 && (cfg.ThRactor != 0 || cfg.MainRactor != 0)
}

// FollowWall makes the program sample the process's threads as they leave
// a CPU too, weighed by the time they stay off it (record --wall).
func (cfg *ProcessConfig) FollowWall(on bool) {
	cfg.Wall = 0
	if on {
		cfg.Wall = 1
	}
}

// labelObj is LABEL_OBJ in ruby.bpf.c: the bytes of a label's object value
// the program copies.
const labelObj = 64

// LabelsTLS is where a thread-local variable of a loaded shared object
// lives, for a reader that knows only the thread pointer (what package
// threadlocal finds): the module's block through the thread's DTV, or at a
// fixed offset from the thread pointer when it is in static TLS.
type LabelsTLS struct {
	ModID, Offset                    uint64
	DTVPointer, DTVEntrySize, DTVVal int64
	DTVCounter                       int64
	Generation                       uint64
	Static                           bool
	TPOffset                         int64
}

// ReadLabels makes the program read request labels (ruby-profiler's
// per-fiber state) through the thread-local variable at v; a zero ModID
// stops it.
func (cfg *ProcessConfig) ReadLabels(v LabelsTLS) error {
	if v.ModID == 0 {
		cfg.LabelsMod = 0
		return nil
	}
	if v.ModID > 4096 || v.DTVEntrySize <= 0 || v.DTVEntrySize > 64 || v.DTVVal < 0 || v.DTVVal+8 > v.DTVEntrySize ||
		v.DTVCounter < 0 || v.DTVCounter+8 > v.DTVEntrySize {
		return fmt.Errorf("labels: module %d, DTV entries of %d bytes with the block at %d: not what the program reads",
			v.ModID, v.DTVEntrySize, v.DTVVal)
	}
	cfg.LabelsMod, cfg.LabelsOffset, cfg.LabelsDtv = v.ModID, v.Offset, v.DTVPointer
	cfg.LabelsDtvEntry, cfg.LabelsDtvVal, cfg.LabelsDtvCounter = u32(v.DTVEntrySize), u32(v.DTVVal), u32(v.DTVCounter)
	cfg.LabelsGeneration, cfg.LabelsTpOffset, cfg.LabelsStatic = v.Generation, v.TPOffset, 0
	if v.Static {
		cfg.LabelsStatic = 1
	}
	return nil
}
