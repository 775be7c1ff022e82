package payload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/rubyperf/rubyperf/rubystack"
)

// The payload the program writes as a sample's RAW data: a header, then
// frames, leaf first. RAW is padded past Length by the kernel.
const (
	Magic = 0x46504252 // "RBPF"
	// Version is the version the program writes. Version 1 (older
	// recordings, still read) had Frame.CME resolved to a method entry;
	// before version 3 the header had no Gen (it reads as 0); before
	// version 4 no GC stamp (Payload.GC reads as not stamped); before
	// version 5 no thread state (Payload.Thread reads as unknown); before
	// version 6 no labels, and a header 8 bytes shorter; before version 7
	// a frame's pc had no PC_*_OLD bits; before version 8 no native frames
	// (the header 8 bytes shorter); before version 10 no allocation
	// samples (the header 8 bytes shorter); before version 12 no
	// allocation window (the header 8 bytes shorter); before version 14
	// no allocated slot, number or class (the header 20 bytes shorter).
	// Versions 9, 11 and 13 are the compact forms of versions 8, 10 and
	// 12 (CompactVersionV8, CompactVersionV10, CompactVersionV12).
	Version = 14

	// MaxLabels is the most request labels one sample carries (MAX_LABELS).
	MaxLabels = 8

	// MaxFrames is the deepest Ruby stack one sample carries (MAX_FRAMES in
	// ruby.bpf.c); deeper stacks are cut and flagged Truncated.
	MaxFrames = 2048

	// MaxNatives is the most native frames one sample carries (MAX_NATIVE).
	MaxNatives = 512
)

// Payload flags (payload_header.flags).
const (
	Truncated = 1 << 0
	NoEC      = 1 << 1
	ReadError = 1 << 2
	BadCFP    = 1 << 3
	TopJIT    = 1 << 4 // the top frame's cfp->jit_return is set

	GCStamped    = 1 << 5 // GC.Count and GC.Epoch were read
	GCMarking    = 1 << 6 // the GC was marking (a major GC's incremental marking, or a minor GC's)
	GCCompacting = 1 << 7 // the GC was compacting: objects may move

	// Named is set by the recorder, never by the program: each
	// frame's Iseq holds the id of its name in the recording's symbol
	// table, decided when the sample was read (NameFrames).
	Named = 1 << 8

	GCRunning   = 1 << 9  // flags.during_gc: a GC was under way
	gcPhaseBits = 10      // 2 bits from here: a GCPhase
	GVLKnown    = 1 << 12 // the thread's Ractor's running_ec was read
	GVLHeld     = 1 << 13 // ... and was the sample's EC: the thread held the GVL
	RegionKnown = 1 << 14 // the thread's unblock.func was read
	InRegion    = 1 << 15 // ... and was set: a blocking region (the GVL released)
	// OffCPU: taken as the thread left a CPU (record --wall). The
	// program puts the time it left (CLOCK_MONOTONIC ns) in Period; the
	// recorder replaces it with the time the thread stayed off.
	OffCPU    = 1 << 16
	Preempted = 1 << 17 // ... preempted: it left runnable, not blocked
	// GVLLast: GVLHeld says the thread was the last to take the GVL
	// (ractor running_ec), which it stays after releasing it.
	GVLLast    = 1 << 18
	stateFlags = GCRunning | 3<<gcPhaseBits | GVLKnown | GVLHeld |
		RegionKnown | InRegion | OffCPU | Preempted | GVLLast

	LabelsCut = 1 << 19 // the fiber had more than MaxLabels labels
	LabelsBad = 1 << 20 // its label table did not read as one
	// LabelsNamed is set by the recorder, never by the program: each
	// label's Key and Value hold ids of names in the recording's symbol
	// table (NameLabels).
	LabelsNamed = 1 << 21
	// OldStale: a GC started while the program read the frames'
	// generations (Frame.IseqOld, Frame.MEOld), which say nothing then.
	OldStale = 1 << 22
	// Alloc: an allocation sample (record --alloc), taken as the thread
	// refilled its Ractor's allocation cache: Period is the objects it
	// stands for, AllocBytes their bytes. (1 << 23 is Compact.)
	Alloc = 1 << 24
	// AllocClassed is set by the recorder, never by the program: an
	// allocation sample's AllocType and AllocClass say what its slot held
	// (SetAllocClass).
	AllocClassed = 1 << 25
)

// GCPhase is the phase of a GC under way (GC_PHASE_* in ruby.bpf.c).
type GCPhase uint8

const (
	GCPhaseUnknown GCPhase = iota
	GCPhaseMarking
	GCPhaseSweeping
	GCPhaseCompacting
)

func (p GCPhase) String() string {
	switch p {
	case GCPhaseMarking:
		return "marking"
	case GCPhaseSweeping:
		return "sweeping"
	case GCPhaseCompacting:
		return "compacting"
	}
	return ""
}

// ThreadFacts are what the program read of the sampled thread's state,
// besides its stack. A fact the layout could not read is not Known.
type ThreadFacts struct {
	GCRunning bool // a GC was under way in the process
	GCPhase   GCPhase
	GVLKnown  bool
	GVLHeld   bool // the thread held its Ractor's GVL
	// GVLLast: GVLHeld says only that the thread was the last to take the
	// GVL (the layout has no owner field): it may have released it since.
	GVLLast     bool
	RegionKnown bool
	InRegion    bool // the thread was in a blocking region: it had released the GVL
	OffCPU      bool // taken as the thread left the CPU (record --wall)
	Preempted   bool // ... preempted, not blocked
}

// Frame bits in the low bits of frame.cme_flags.
const (
	frameCFrame = 1 << 0
	frameFinish = 1 << 1
	frameError  = 1 << 2
	frameBits   = 7

	// Low bits of frame.pc (PC_* in ruby.bpf.c), from version 7.
	pcIseqOld = 1 << 0
	pcMEOld   = 1 << 1
	pcEnvOld  = 1 << 2
	pcBits    = 7
)

// Payload is one decoded sample payload.
type Payload struct {
	Flags    uint32
	PID, TID uint32
	// Gen tells apart the process images PID had while recording: the
	// ProcessConfig.Gen it was sampled with.
	Gen     uint32
	EC, CFP uint64
	// Period is the cpu-clock period this sample stands for, in ns; of an
	// allocation sample (Flags Alloc), the objects allocated.
	Period uint64
	// AllocBytes are the bytes of an allocation sample's objects.
	AllocBytes uint64
	// AllocWindow is the window of armed uprobes an allocation sample was
	// taken in (version 12): the recorder weighs the window's samples
	// when it ends.
	AllocWindow uint32
	// AllocSlot is the slot the sample's allocation took (version 14; 0:
	// not known), AllocSeq the sample's number among its thread's. Once
	// the recorder has learned what the slot held (flag AllocClassed),
	// AllocClass is the id of the object's class's name in the
	// recording's symbol table.
	AllocSlot  uint64
	AllocSeq   uint32
	AllocClass uint64
	GC         GCStamp
	Thread     ThreadFacts
	Frames     []Frame
	// EnvsLeft counts the frames whose environment chain the program left
	// to user space (Frame.Env).
	EnvsLeft int
	// Labels are the sampled fiber's request labels (ruby-profiler's state).
	Labels []Label
	// Natives are the user stack's PCs as the program unwound them with
	// the process's unwind tables (bpf.Sampler.UnwindMappings), leaf first:
	// the interrupted PC, then return addresses. NativeStop says why the
	// walk ended (NativeOff: the program did not unwind).
	Natives    []uint64
	NativeStop NativeStop
}

// NativeStop says why the program's native walk ended (NATIVE_* in
// ruby.bpf.c).
type NativeStop uint32

const (
	NativeOff         NativeStop = iota // not unwound: the process has no tables
	NativeOutermost                     // the thread's first frame: the stack is whole
	NativeNoTable                       // a PC in no mapping with rows (JIT code, no CFI)
	NativeNoRule                        // no row for the PC
	NativeUnsupported                   // the row's rule is not modelled
	NativeFPUnknown                     // the CFA needs a frame pointer no rule kept
	NativeRead                          // the stack could not be read
	NativeNotUp                         // the next frame would not lie above
	NativeDepth                         // MaxNatives frames
	NativeNoRegs                        // the thread's user registers could not be read
)

var nativeStopNames = [...]string{"not unwound", "outermost", "no table", "no rule", "unsupported rule",
	"frame pointer unknown", "unreadable stack", "stack not unwinding upwards", "too deep", "no registers"}

func (s NativeStop) String() string {
	if int(s) < len(nativeStopNames) {
		return nativeStopNames[s]
	}
	return fmt.Sprintf("native stop %d", uint32(s))
}

// Label is one key/value pair of a fiber's request labels as the program
// copied it: an ID and a VALUE, and of a heap object value its first bytes
// (Obj) and, for a String kept outside its object, its first bytes (Ext).
type Label = cLabel

// GCStamp is where the process's garbage collector was when a sample was
// taken. Code is freed, and its memory reused, only by the GC: a name read
// from an address holds for the samples of GC intervals in which the code
// there could not have been replaced (recording's frame spans).
type GCStamp struct {
	Stamped    bool   // the program read the counters (the layout has them)
	Count      uint64 // GCs started (objspace profile.count)
	Epoch      uint64 // Count when the last major GC started (rgengc.last_major_gc)
	Marking    bool   // a GC was marking: a major one incrementally, or a minor one, in which no Ruby code runs
	Compacting bool   // the GC was compacting: objects may move
}

// Interval numbers the stretch of time between GC phase changes a stamp
// falls in: 2*Count while the GC that Count started is marking, 2*Count+1
// after. Only a major GC marks while Ruby code runs (incrementally); a
// sample stamped in a minor GC's marking was taken inside that GC.
func (s GCStamp) Interval() uint64 {
	if s.Marking {
		return 2 * s.Count
	}
	return 2*s.Count + 1
}

// Frame is one control frame as the program saw it.
type Frame struct {
	Iseq, PC uint64
	// CME leads to the frame's method entry: for a method's frame, its local
	// environment's me_cref as found (the entry itself, an svar that may
	// hold one, or neither), which rubystack.Reader.LocalMethodEntry
	// resolves; for a block of define_method, the entry the program found.
	CME    uint64
	CFrame bool // a C frame (VM_FRAME_FLAG_CFRAME)
	Finish bool // the first frame of a VM entry (VM_FRAME_FLAG_FINISH)
	Error  bool // its environment could not be read
	// Env: the program stopped short of the end of the frame's environment
	// chain (longer than it follows), at this environment. Error is set
	// until WalkEnvs walks on from there and finds CME.
	Env uint64
	// IseqOld and MEOld: the frame was not named for its sample's GC
	// interval when sampled, and its iseq, and the object in CME (or none),
	// were in the old generation then (never with OldStale). A C
	// frame has only MEOld, whatever was named before.
	IseqOld, MEOld bool
	// EnvOld: Env escaped to the heap, as an object of the old generation
	// when sampled (never with OldStale).
	EnvOld bool
}

// frameSize is a constant so that the frame loops index without checks.
const frameSize = int(unsafe.Sizeof(cFrame{}))

// FrameSize is the bytes of one frame in a payload the program wrote.
const FrameSize = frameSize

var (
	headerSize = int(unsafe.Sizeof(cPayloadHeader{}))
	labelSize  = int(unsafe.Sizeof(cLabel{}))
	// headerSizeV5 is the header of versions 1 to 5: without nlabels and
	// label_size.
	headerSizeV5 = int(unsafe.Offsetof(cPayloadHeader{}.Nlabels))
	// headerSizeV7 is the header of versions 6 and 7: without nnatives
	// and native_stop.
	headerSizeV7 = int(unsafe.Offsetof(cPayloadHeader{}.Nnatives))
	// headerSizeV8 is the header of version 8 (and of its compact form,
	// version 9): without alloc_bytes.
	headerSizeV8 = int(unsafe.Offsetof(cPayloadHeader{}.AllocBytes))
	// headerSizeV10 is the header of version 10 (and of its compact form,
	// version 11): without alloc_window.
	headerSizeV10 = int(unsafe.Offsetof(cPayloadHeader{}.AllocWindow))
	// headerSizeV12 is the header of version 12 (and of its compact form,
	// version 13): without alloc_seq, alloc_slot and alloc_class.
	headerSizeV12 = int(unsafe.Offsetof(cPayloadHeader{}.AllocSeq))
)

// Decode reads a sample's RAW bytes. It trusts nothing in them.
func Decode(raw []byte) (*Payload, error) {
	p := &Payload{}
	if err := DecodeInto(p, raw); err != nil {
		return nil, err
	}
	return p, nil
}

// DecodeInto is Decode into p, reusing its Frames' storage.
func DecodeInto(p *Payload, raw []byte) error {
	d, err := DecodeHeader(p, raw)
	if err != nil {
		return err
	}
	n := len(d.Bytes) / frameSize
	frames := p.Frames[:0]
	if cap(frames) < n {
		frames = make([]Frame, 0, n)
	}
	p.Frames = frames[:n]
	p.EnvsLeft = decodeFrames(p.Frames, d)
	return nil
}

// FrameData is a payload's frames as the program wrote them, leaf first,
// and what decoding them needs of its header: DecodeHeader gives it,
// DecodeFrames decodes it.
type FrameData struct {
	Bytes   []byte // Nframes frames of FrameSize bytes
	pcFlags bool   // a Ruby frame's pc carries its old-generation bits (version 7)
	fresh   bool   // and they mean something (no OldStale)
}

// DecodeHeader is DecodeInto but for the frames: p.Frames is left empty
// (its storage kept), and the frames are returned for DecodeFrames.
func DecodeHeader(p *Payload, raw []byte) (FrameData, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return FrameData{}, err
	}
	if h.Flags&Compact != 0 {
		return FrameData{}, ErrCompact
	}
	labels, natives := p.Labels[:0], p.Natives[:0]
	*p = Payload{Flags: h.Flags, PID: h.Pid, TID: h.Tid, EC: h.Ec, CFP: h.Cfp, Period: h.Period,
		Frames: p.Frames[:0], NativeStop: NativeStop(h.NativeStop)}
	if h.Flags&Alloc != 0 {
		p.AllocBytes, p.AllocWindow, p.AllocSlot, p.AllocSeq = h.AllocBytes, h.AllocWindow, h.AllocSlot, h.AllocSeq
		if h.Flags&AllocClassed != 0 {
			p.AllocClass = h.AllocClass
		}
	}
	if h.Nnatives > 0 {
		nb := raw[int(h.HeaderSize)+int(h.Nframes)*frameSize+int(h.Nlabels)*labelSize:]
		for i := 0; i < int(h.Nnatives); i++ {
			natives = append(natives, binary.LittleEndian.Uint64(nb[i*8:]))
		}
		p.Natives = natives
	}
	if h.Nlabels > 0 {
		lb := raw[int(h.HeaderSize)+int(h.Nframes)*frameSize:]
		for i := 0; i < int(h.Nlabels); i++ {
			var l Label
			if _, err := binary.Decode(lb[i*labelSize:(i+1)*labelSize], binary.LittleEndian, &l); err != nil {
				return FrameData{}, fmt.Errorf("payload: label %d: %w", i, err)
			}
			labels = append(labels, l)
		}
		p.Labels = labels
	}
	if h.Version >= 3 {
		p.Gen = h.Gen
	}
	if h.Version >= 5 {
		f := h.Flags
		p.Thread = ThreadFacts{GCRunning: f&GCRunning != 0, GCPhase: GCPhase(f >> gcPhaseBits & 3),
			GVLKnown: f&GVLKnown != 0, GVLHeld: f&GVLHeld != 0, GVLLast: f&GVLLast != 0,
			RegionKnown: f&RegionKnown != 0, InRegion: f&InRegion != 0,
			OffCPU: f&OffCPU != 0, Preempted: f&Preempted != 0}
	} else {
		p.Flags &^= stateFlags // bits that meant nothing then
	}
	if h.Version >= 4 && h.Flags&GCStamped != 0 {
		p.GC = GCStamp{Stamped: true, Count: h.GcCount, Epoch: h.GcEpoch,
			Marking: h.Flags&GCMarking != 0, Compacting: h.Flags&GCCompacting != 0}
	}
	return FrameData{Bytes: raw[h.HeaderSize:][:int(h.Nframes)*frameSize], pcFlags: h.Version >= 7,
		fresh: h.Flags&OldStale == 0}, nil
}

// DecodeFrames decodes d, the frames of the payload DecodeHeader decoded
// into p, into the end of buf, which it returns (grown, its end kept, if
// short); p.Frames is that end. Its outermost known frames are not decoded:
// buf's end holds them already, decoded by an earlier call from the same
// bytes under the same OldStale, with no environment left (Env), and
// changed since by NameFrames alone (which the caller does again). So a
// thread's consecutive samples, which share all but a few leaf frames,
// decode only those. p.EnvsLeft counts the frames decoded.
func DecodeFrames(p *Payload, d FrameData, buf []Frame, known int) []Frame {
	n := len(d.Bytes) / frameSize
	known = max(0, min(known, n, len(buf)))
	if len(buf) < n {
		grown := make([]Frame, max(n, 2*len(buf)))
		copy(grown[len(grown)-known:], buf[len(buf)-known:])
		buf = grown
	}
	p.Frames = buf[len(buf)-n:]
	p.EnvsLeft = decodeFrames(p.Frames[:n-known], FrameData{Bytes: d.Bytes[:(n-known)*frameSize], pcFlags: d.pcFlags, fresh: d.fresh})
	return buf
}

// decodeFrames decodes d into frames (as many), and counts those whose
// environment chain the program left (Frame.Env).
func decodeFrames(frames []Frame, d FrameData) (envs int) {
	b, pcFlags, fresh := d.Bytes, d.pcFlags, d.fresh
	for i := range frames {
		f := b[i*frameSize:][:frameSize]
		cf := binary.LittleEndian.Uint64(f[16:])
		// Field by field into place: a whole Frame built on the stack and
		// copied stalls on its flags' byte stores (store forwarding), which
		// made this loop most of the recorder's per-frame cost.
		iseq, pc, cme := binary.LittleEndian.Uint64(f[0:]), binary.LittleEndian.Uint64(f[8:]), cf&^frameBits
		cframe, finish, failed := cf&frameCFrame != 0, cf&frameFinish != 0, cf&frameError != 0
		var iseqOld, meOld, envOld bool
		if pcFlags && (!cframe || pc&^pcBits == 0) {
			// A Ruby frame's pc is 8-aligned; a C frame's is 0.
			bits := pc & pcBits
			pc &^= pcBits
			iseqOld, meOld, envOld = bits&pcIseqOld != 0 && fresh, bits&pcMEOld != 0 && fresh, bits&pcEnvOld != 0 && fresh
		}
		var env uint64
		if failed && cme != 0 {
			env, cme = cme, 0 // an error with an address: where the walk stopped
			envs++
		}
		fr := &frames[i]
		fr.Iseq, fr.PC, fr.CME, fr.Env = iseq, pc, cme, env
		fr.CFrame, fr.Finish, fr.Error = cframe, finish, failed
		fr.IseqOld, fr.MEOld, fr.EnvOld = iseqOld, meOld, envOld
	}
	return envs
}

// decodeHeader reads and checks a payload's header: its frames lie inside
// raw.
func decodeHeader(raw []byte) (cPayloadHeader, error) {
	var h cPayloadHeader
	if len(raw) < headerSizeV5 {
		return h, fmt.Errorf("payload: %d bytes, shorter than its header", len(raw))
	}
	// A header of an older version is shorter: what it lacks reads as 0.
	// The header as the program's struct lays it out, little-endian as the
	// hosts of the program's builds (bpfel) are: copied, not decoded field
	// by field through reflection, which allocates for every sample.
	hb := unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h))
	copy(hb, raw[:min(len(raw), headerSize, int(binary.LittleEndian.Uint16(raw[6:])))])
	if h.Version < 6 {
		h.Nlabels, h.LabelSize = 0, 0
	}
	if h.Version < 8 {
		h.Nnatives, h.NativeStop = 0, 0
	}
	if h.Version < 10 {
		h.AllocBytes = 0
		h.Flags &^= Alloc
	}
	if h.Version < 12 {
		h.AllocWindow = 0
	}
	if h.Version < 14 {
		h.AllocSeq, h.AllocSlot, h.AllocClass = 0, 0, 0
		h.Flags &^= AllocClassed
	}
	compact := h.Flags&Compact != 0
	switch {
	case h.Magic != Magic:
		return h, fmt.Errorf("payload: bad magic %#x", h.Magic)
	case h.Version < 1 || h.Version > max(Version, CompactVersion):
		return h, fmt.Errorf("payload: version %d, this rubyperf reads 1 to %d", h.Version, max(Version, CompactVersion))
	case compact != (compactHeaderSize(h.Version) != 0):
		return h, fmt.Errorf("payload: version %d with flags %#x", h.Version, h.Flags)
	case compact:
		// Its frames are in its file's trees: TreeDecoder checks them.
		if int(h.HeaderSize) != compactHeaderSize(h.Version) || h.Length < uint32(h.HeaderSize) || int64(h.Length) > int64(len(raw)) ||
			h.Nframes > MaxFrames || h.Nnatives > MaxNatives || h.Nlabels > MaxLabels ||
			h.Nlabels > 0 && int(h.LabelSize) != labelSize {
			return h, fmt.Errorf("payload: compact: header of %d bytes, length %d of %d, %d frames, %d native frames, %d labels",
				h.HeaderSize, h.Length, len(raw), h.Nframes, h.Nnatives, h.Nlabels)
		}
		return h, nil
	case int(h.HeaderSize) < headerSizeV5 || h.Version >= 6 && int(h.HeaderSize) < headerSizeV7 ||
		h.Version >= 8 && int(h.HeaderSize) < headerSizeV8 || h.Version >= 10 && int(h.HeaderSize) < headerSizeV10 ||
		h.Version >= 12 && int(h.HeaderSize) < headerSizeV12 || h.Version >= 14 && int(h.HeaderSize) < headerSize ||
		int(h.HeaderSize) > len(raw):
		return h, fmt.Errorf("payload: header size %d", h.HeaderSize)
	case h.Nlabels > MaxLabels || h.Nlabels > 0 && int(h.LabelSize) != labelSize:
		return h, fmt.Errorf("payload: %d labels of %d bytes", h.Nlabels, h.LabelSize)
	case int64(h.HeaderSize)+int64(h.Nframes)*int64(frameSize)+int64(h.Nlabels)*int64(labelSize) > int64(h.Length):
		return h, fmt.Errorf("payload: %d frames and %d labels do not fit %d bytes", h.Nframes, h.Nlabels, h.Length)
	case int64(h.Length) > int64(len(raw)) || h.Length < uint32(h.HeaderSize):
		return h, fmt.Errorf("payload: length %d of %d bytes", h.Length, len(raw))
	case h.Nframes > MaxFrames || int64(h.HeaderSize)+int64(h.Nframes)*int64(frameSize) > int64(h.Length):
		return h, fmt.Errorf("payload: %d frames do not fit %d bytes", h.Nframes, h.Length)
	case h.Nnatives > MaxNatives ||
		int64(h.HeaderSize)+int64(h.Nframes)*int64(frameSize)+int64(h.Nlabels)*int64(labelSize)+8*int64(h.Nnatives) > int64(h.Length):
		return h, fmt.Errorf("payload: %d native frames do not fit %d bytes", h.Nnatives, h.Length)
	}
	return h, nil
}

// compactHeaderSize is the header size of a compact payload of version v,
// 0 if v is not a compact version.
func compactHeaderSize(v uint16) int {
	switch v {
	case CompactVersionV8:
		return headerSizeV8
	case CompactVersionV10:
		return headerSizeV10
	case CompactVersionV12:
		return headerSizeV12
	case CompactVersion:
		return headerSize
	}
	return 0
}

// SetOffCPU writes into an off-CPU sample's RAW payload the time its thread
// stayed off the CPU, in place of the time it left.
func SetOffCPU(raw []byte, ns uint64) error {
	h, err := decodeHeader(raw)
	if err != nil {
		return err
	}
	if h.Version < 5 || h.Flags&OffCPU == 0 {
		return errors.New("payload: not taken off the CPU")
	}
	binary.LittleEndian.PutUint64(raw[unsafe.Offsetof(h.Period):], ns)
	return nil
}

// WeighAlloc multiplies an allocation sample's objects and bytes (in a
// RAW payload as the program wrote it) by weight, rounding, and returns
// its objects then.
func WeighAlloc(raw []byte, weight float64) (uint64, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return 0, err
	}
	if h.Flags&Alloc == 0 || h.Flags&Compact != 0 {
		return 0, errors.New("payload: not an allocation sample as the program writes it")
	}
	objects, bytes := scaleCount(h.Period, weight), scaleCount(h.AllocBytes, weight)
	binary.LittleEndian.PutUint64(raw[unsafe.Offsetof(h.Period):], objects)
	binary.LittleEndian.PutUint64(raw[unsafe.Offsetof(h.AllocBytes):], bytes)
	return objects, nil
}

// SetAllocClass writes into an allocation sample's RAW payload (as the
// program wrote it) the id of the name of the class of the object its slot
// held.
func SetAllocClass(raw []byte, class uint64) error {
	h, err := decodeHeader(raw)
	if err != nil {
		return err
	}
	if h.Version < 14 || h.Flags&Alloc == 0 || h.Flags&Compact != 0 {
		return errors.New("payload: not an allocation sample as the program writes it")
	}
	binary.LittleEndian.PutUint64(raw[unsafe.Offsetof(h.AllocClass):], class)
	binary.LittleEndian.PutUint32(raw[unsafe.Offsetof(h.Flags):], h.Flags|AllocClassed)
	return nil
}

// scaleCount is n times weight, rounded, within a uint64.
func scaleCount(n uint64, weight float64) uint64 {
	v := math.Round(float64(n) * weight)
	switch {
	case !(v > 0): // and NaN
		return 0
	case v >= math.MaxUint64:
		return math.MaxUint64
	}
	return uint64(v)
}

// NameFrames overwrites, in a sample's RAW payload as the program wrote it,
// each frame's iseq with ids[i] and flags the payload Named: the
// names a recording decided for this sample travel with it. It changes
// nothing and says why when the payload is not one it can read. It reads
// only the header: the caller has decoded the payload already.
//
// p, when not nil, is raw decoded: it is given the same names, and reads
// as raw decoded again would.
func NameFrames(raw []byte, p *Payload, ids []uint64) error {
	h, err := decodeHeader(raw)
	if err != nil {
		return err
	}
	if h.Flags&Compact != 0 {
		return ErrCompact
	}
	hs, n := int(h.HeaderSize), int(h.Nframes)
	if n != len(ids) || p != nil && len(p.Frames) != n {
		return fmt.Errorf("payload: %d names for %d frames", len(ids), n)
	}
	iseq := int(unsafe.Offsetof(cFrame{}.Iseq))
	for i, id := range ids {
		binary.LittleEndian.PutUint64(raw[hs+i*frameSize+iseq:], id)
		if p != nil {
			p.Frames[i].Iseq = id
		}
	}
	binary.LittleEndian.PutUint32(raw[unsafe.Offsetof(h.Flags):], h.Flags|Named)
	if p != nil {
		p.Flags |= Named
	}
	return nil
}

// WalkEnvs finishes the walks the program left at long environment chains
// (Frame.Env) with walk, which says where the chain from a frame's Env
// leads (ok false: it cannot say): each such frame gets that method entry
// (and MEOld, if EnvOld) and loses Error, or keeps Error. It returns how many it walked.
func (p *Payload) WalkEnvs(walk func(f Frame) (cme uint64, ok bool)) int {
	n := 0
	for i := range p.Frames {
		f := &p.Frames[i]
		if f.Env == 0 {
			continue
		}
		if cme, ok := walk(*f); ok {
			f.CME, f.Env, f.Error = cme, 0, false
			// The environment, old, keeps the rest of its chain, the
			// method entry included, as it was when sampled.
			f.MEOld = f.EnvOld
			n++
		}
	}
	p.EnvsLeft -= n
	return n
}

var errNotRubyFrame = errors.New("not a frame rb_profile_frames reports")

// RawFrames turns the payload's control frames into the frames
// rb_profile_frames reports, by the same rules as rubystack's walker: Ruby
// frames (with a non-NULL pc where the Layout says so) and C-method frames.
// Deciding that a C frame is a C method needs its method definition, read
// through r from the live process or a recorded symbol table.
func (p *Payload) RawFrames(r *rubystack.Reader) []rubystack.RawFrame {
	out := make([]rubystack.RawFrame, 0, len(p.Frames))
	for i, f := range p.Frames {
		rf, err := toRawFrame(r, f)
		if err == nil {
			rf.Top = i == 0 // the walk starts at ec->cfp, whose pc a JIT may leave stale
			// As rubystack's walker: the top frame runs JIT code (its line is 0
			// where rb_profile_frames says so).
			rf.JIT = i == 0 && !f.CFrame && p.Flags&TopJIT != 0 &&
				r.Layout.Capabilities.TopJITFrameLineZero
			out = append(out, rf)
		}
	}
	return out
}

func toRawFrame(r *rubystack.Reader, f Frame) (rubystack.RawFrame, error) {
	if f.Error {
		return rubystack.RawFrame{Unknown: true}, nil
	}
	if !f.CFrame {
		if r.Layout.Capabilities.SkipDummyBottomFrame && f.PC == 0 {
			return rubystack.RawFrame{}, errNotRubyFrame
		}
	}
	cme, err := r.LocalMethodEntry(f.CME)
	if err != nil {
		return rubystack.RawFrame{Unknown: true}, nil
	}
	if !f.CFrame {
		return rubystack.RawFrame{Iseq: f.Iseq, PC: f.PC, CME: cme}, nil
	}
	if !r.Layout.Capabilities.CFuncFrames || cme == 0 || !r.IsCFunc(cme) {
		return rubystack.RawFrame{}, errNotRubyFrame
	}
	return rubystack.RawFrame{CME: cme, CFunc: true}, nil
}

// NameLabels overwrites, in a sample's RAW payload, each label's key and
// value with the ids of their names (names[i] for label i) and flags the
// payload LabelsNamed: a recording carries what its labels said, not
// addresses that mean something only in the live process.
// p, when not nil, is raw decoded, and is given the same names.
func NameLabels(raw []byte, p *Payload, names [][2]uint64) error {
	h, err := decodeHeader(raw)
	if err != nil {
		return err
	}
	if h.Flags&Compact != 0 {
		return ErrCompact
	}
	if int(h.Nlabels) != len(names) || p != nil && len(p.Labels) != len(names) {
		return fmt.Errorf("payload: %d names for %d labels", len(names), h.Nlabels)
	}
	at := int(h.HeaderSize) + int(h.Nframes)*frameSize
	key, value := int(unsafe.Offsetof(cLabel{}.Key)), int(unsafe.Offsetof(cLabel{}.Value))
	for i, n := range names {
		binary.LittleEndian.PutUint64(raw[at+i*labelSize+key:], n[0])
		binary.LittleEndian.PutUint64(raw[at+i*labelSize+value:], n[1])
		if p != nil {
			p.Labels[i].Key, p.Labels[i].Value = n[0], n[1]
		}
	}
	binary.LittleEndian.PutUint32(raw[unsafe.Offsetof(h.Flags):], h.Flags|LabelsNamed)
	if p != nil {
		p.Flags |= LabelsNamed
	}
	return nil
}

// FrameBytes is the part of raw, a payload the program wrote (not
// compact), that holds its frames, leaf first, as written: for comparing
// two samples' frames without decoding them.
func FrameBytes(raw []byte) ([]byte, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return nil, err
	}
	if h.Flags&Compact != 0 {
		return nil, ErrCompact
	}
	return raw[h.HeaderSize:][:int(h.Nframes)*frameSize], nil
}

// SharedOutermost is how many frames two samples' frame bytes (as
// FrameBytes gives them, leaf first) end with alike: the outermost part of
// their stacks they share. Consecutive samples of a thread share all but a
// few leaf frames, so it compares blocks of frames first.
func SharedOutermost(a, b []byte) int {
	n := min(len(a), len(b)) / frameSize
	tail := func(x []byte, from, to int) []byte { return x[len(x)-to*frameSize : len(x)-from*frameSize] }
	const block = 16
	k := 0
	for k+block <= n && bytes.Equal(tail(a, k, k+block), tail(b, k, k+block)) {
		k += block
	}
	for k < n && bytes.Equal(tail(a, k, k+1), tail(b, k, k+1)) {
		k++
	}
	return k
}
