package perfdata

import (
	"fmt"
	"math/bits"
)

// Attr mirrors struct perf_event_attr (include/uapi/linux/perf_event.h)
// field by field, up to config3 (PERF_ATTR_SIZE_VER8). Unions are one field
// named after both members. Reserved fields are not kept.
type Attr struct {
	Type                    uint32     // type: TypeHardware, TypeSoftware, ...
	Size                    uint32     // size: bytes of the struct as recorded; the Writer always writes AttrSize
	Config                  uint64     // config: e.g. CountSWCPUClock for TypeSoftware
	SamplePeriodOrFreq      uint64     // sample_period, or sample_freq when Flags has FlagFreq
	SampleType              SampleType // sample_type: the fields of each SAMPLE record
	ReadFormat              ReadFormat // read_format: the layout of PERF_SAMPLE_READ
	Flags                   AttrFlags  // the bit-field word: disabled, inherit, ..., sigtrap
	WakeupEventsOrWatermark uint32     // wakeup_events, or wakeup_watermark when Flags has FlagWatermark
	BPType                  uint32     // bp_type
	Config1                 uint64     // bp_addr / kprobe_func / uprobe_path / config1
	Config2                 uint64     // bp_len / kprobe_addr / probe_offset / config2
	BranchSampleType        uint64     // branch_sample_type: PERF_SAMPLE_BRANCH_* bits
	SampleRegsUser          uint64     // sample_regs_user: registers in PERF_SAMPLE_REGS_USER
	SampleStackUser         uint32     // sample_stack_user: bytes of stack in PERF_SAMPLE_STACK_USER
	ClockID                 int32      // clockid: used when Flags has FlagUseClockID
	SampleRegsIntr          uint64     // sample_regs_intr: registers in PERF_SAMPLE_REGS_INTR
	AuxWatermark            uint32     // aux_watermark
	SampleMaxStack          uint16     // sample_max_stack
	AuxSampleSize           uint32     // aux_sample_size
	SigData                 uint64     // sig_data
	Config3                 uint64     // config3 (size 136; perf 6.1 refuses such files, so the Writer does too)
}

// Sizes of struct perf_event_attr (PERF_ATTR_SIZE_VER*).
const (
	AttrSizeVer0 = 64  // PERF_ATTR_SIZE_VER0: the first published struct
	AttrSize     = 128 // PERF_ATTR_SIZE_VER7: what the Writer writes; perf 6.1 accepts at most this
	attrSizeVer8 = 136 // PERF_ATTR_SIZE_VER8: adds config3
	maxAttrSize  = 4096
)

// Event types (enum perf_type_id), the values of Attr.Type.
const (
	TypeHardware   = 0 // PERF_TYPE_HARDWARE
	TypeSoftware   = 1 // PERF_TYPE_SOFTWARE
	TypeTracepoint = 2 // PERF_TYPE_TRACEPOINT
	TypeHWCache    = 3 // PERF_TYPE_HW_CACHE
	TypeRaw        = 4 // PERF_TYPE_RAW
	TypeBreakpoint = 5 // PERF_TYPE_BREAKPOINT
)

// Hardware event configs (enum perf_hw_id), for TypeHardware.
const (
	CountHWCPUCycles             = 0 // PERF_COUNT_HW_CPU_CYCLES
	CountHWInstructions          = 1 // PERF_COUNT_HW_INSTRUCTIONS
	CountHWCacheReferences       = 2 // PERF_COUNT_HW_CACHE_REFERENCES
	CountHWCacheMisses           = 3 // PERF_COUNT_HW_CACHE_MISSES
	CountHWBranchInstructions    = 4 // PERF_COUNT_HW_BRANCH_INSTRUCTIONS
	CountHWBranchMisses          = 5 // PERF_COUNT_HW_BRANCH_MISSES
	CountHWBusCycles             = 6 // PERF_COUNT_HW_BUS_CYCLES
	CountHWStalledCyclesFrontend = 7 // PERF_COUNT_HW_STALLED_CYCLES_FRONTEND
	CountHWStalledCyclesBackend  = 8 // PERF_COUNT_HW_STALLED_CYCLES_BACKEND
	CountHWRefCPUCycles          = 9 // PERF_COUNT_HW_REF_CPU_CYCLES
)

// Software event configs (enum perf_sw_ids), for TypeSoftware.
const (
	CountSWCPUClock        = 0  // PERF_COUNT_SW_CPU_CLOCK
	CountSWTaskClock       = 1  // PERF_COUNT_SW_TASK_CLOCK
	CountSWPageFaults      = 2  // PERF_COUNT_SW_PAGE_FAULTS
	CountSWContextSwitches = 3  // PERF_COUNT_SW_CONTEXT_SWITCHES
	CountSWCPUMigrations   = 4  // PERF_COUNT_SW_CPU_MIGRATIONS
	CountSWPageFaultsMin   = 5  // PERF_COUNT_SW_PAGE_FAULTS_MIN
	CountSWPageFaultsMaj   = 6  // PERF_COUNT_SW_PAGE_FAULTS_MAJ
	CountSWAlignmentFaults = 7  // PERF_COUNT_SW_ALIGNMENT_FAULTS
	CountSWEmulationFaults = 8  // PERF_COUNT_SW_EMULATION_FAULTS
	CountSWDummy           = 9  // PERF_COUNT_SW_DUMMY
	CountSWBPFOutput       = 10 // PERF_COUNT_SW_BPF_OUTPUT
	CountSWCgroupSwitches  = 11 // PERF_COUNT_SW_CGROUP_SWITCHES
)

// SampleType is perf_event_attr.sample_type: which fields a SAMPLE record
// carries (enum perf_event_sample_format), and which of TID, TIME, ID,
// STREAM_ID, CPU and IDENTIFIER end other records under FlagSampleIDAll.
type SampleType uint64

// PERF_SAMPLE_* bits, in the order their fields appear in a SAMPLE record
// except IDENTIFIER, which comes first.
const (
	SampleIP           SampleType = 1 << 0  // PERF_SAMPLE_IP
	SampleTID          SampleType = 1 << 1  // PERF_SAMPLE_TID
	SampleTime         SampleType = 1 << 2  // PERF_SAMPLE_TIME
	SampleAddr         SampleType = 1 << 3  // PERF_SAMPLE_ADDR
	SampleRead         SampleType = 1 << 4  // PERF_SAMPLE_READ
	SampleCallchain    SampleType = 1 << 5  // PERF_SAMPLE_CALLCHAIN
	SampleID           SampleType = 1 << 6  // PERF_SAMPLE_ID
	SampleCPU          SampleType = 1 << 7  // PERF_SAMPLE_CPU
	SamplePeriod       SampleType = 1 << 8  // PERF_SAMPLE_PERIOD
	SampleStreamID     SampleType = 1 << 9  // PERF_SAMPLE_STREAM_ID
	SampleRaw          SampleType = 1 << 10 // PERF_SAMPLE_RAW
	SampleBranchStack  SampleType = 1 << 11 // PERF_SAMPLE_BRANCH_STACK
	SampleRegsUser     SampleType = 1 << 12 // PERF_SAMPLE_REGS_USER
	SampleStackUser    SampleType = 1 << 13 // PERF_SAMPLE_STACK_USER
	SampleWeight       SampleType = 1 << 14 // PERF_SAMPLE_WEIGHT
	SampleDataSrc      SampleType = 1 << 15 // PERF_SAMPLE_DATA_SRC
	SampleIdentifier   SampleType = 1 << 16 // PERF_SAMPLE_IDENTIFIER
	SampleTransaction  SampleType = 1 << 17 // PERF_SAMPLE_TRANSACTION
	SampleRegsIntr     SampleType = 1 << 18 // PERF_SAMPLE_REGS_INTR
	SamplePhysAddr     SampleType = 1 << 19 // PERF_SAMPLE_PHYS_ADDR
	SampleAux          SampleType = 1 << 20 // PERF_SAMPLE_AUX
	SampleCgroup       SampleType = 1 << 21 // PERF_SAMPLE_CGROUP
	SampleDataPageSize SampleType = 1 << 22 // PERF_SAMPLE_DATA_PAGE_SIZE
	SampleCodePageSize SampleType = 1 << 23 // PERF_SAMPLE_CODE_PAGE_SIZE
	SampleWeightStruct SampleType = 1 << 24 // PERF_SAMPLE_WEIGHT_STRUCT

	sampleKnown = 1<<25 - 1
)

// ReadFormat is perf_event_attr.read_format (enum perf_event_read_format).
type ReadFormat uint64

// PERF_FORMAT_* bits.
const (
	ReadTotalTimeEnabled ReadFormat = 1 << 0 // PERF_FORMAT_TOTAL_TIME_ENABLED
	ReadTotalTimeRunning ReadFormat = 1 << 1 // PERF_FORMAT_TOTAL_TIME_RUNNING
	ReadID               ReadFormat = 1 << 2 // PERF_FORMAT_ID
	ReadGroup            ReadFormat = 1 << 3 // PERF_FORMAT_GROUP
	ReadLost             ReadFormat = 1 << 4 // PERF_FORMAT_LOST
)

// BranchHWIndex is PERF_SAMPLE_BRANCH_HW_INDEX in Attr.BranchSampleType: a
// BRANCH_STACK then carries hw_idx before its entries.
const BranchHWIndex = 1 << 17

// AttrFlags is the u64 bit-field word of perf_event_attr that follows
// read_format (disabled:1, inherit:1, ... sigtrap:1).
type AttrFlags uint64

// The bits of AttrFlags, named after the uapi bit-fields.
const (
	FlagDisabled               AttrFlags = 1 << 0  // disabled
	FlagInherit                AttrFlags = 1 << 1  // inherit
	FlagPinned                 AttrFlags = 1 << 2  // pinned
	FlagExclusive              AttrFlags = 1 << 3  // exclusive
	FlagExcludeUser            AttrFlags = 1 << 4  // exclude_user
	FlagExcludeKernel          AttrFlags = 1 << 5  // exclude_kernel
	FlagExcludeHV              AttrFlags = 1 << 6  // exclude_hv
	FlagExcludeIdle            AttrFlags = 1 << 7  // exclude_idle
	FlagMmap                   AttrFlags = 1 << 8  // mmap
	FlagComm                   AttrFlags = 1 << 9  // comm
	FlagFreq                   AttrFlags = 1 << 10 // freq
	FlagInheritStat            AttrFlags = 1 << 11 // inherit_stat
	FlagEnableOnExec           AttrFlags = 1 << 12 // enable_on_exec
	FlagTask                   AttrFlags = 1 << 13 // task
	FlagWatermark              AttrFlags = 1 << 14 // watermark
	FlagPreciseIPMask          AttrFlags = 3 << 15 // precise_ip:2; see PreciseIP
	FlagMmapData               AttrFlags = 1 << 17 // mmap_data
	FlagSampleIDAll            AttrFlags = 1 << 18 // sample_id_all
	FlagExcludeHost            AttrFlags = 1 << 19 // exclude_host
	FlagExcludeGuest           AttrFlags = 1 << 20 // exclude_guest
	FlagExcludeCallchainKernel AttrFlags = 1 << 21 // exclude_callchain_kernel
	FlagExcludeCallchainUser   AttrFlags = 1 << 22 // exclude_callchain_user
	FlagMmap2                  AttrFlags = 1 << 23 // mmap2
	FlagCommExec               AttrFlags = 1 << 24 // comm_exec
	FlagUseClockID             AttrFlags = 1 << 25 // use_clockid
	FlagContextSwitch          AttrFlags = 1 << 26 // context_switch
	FlagWriteBackward          AttrFlags = 1 << 27 // write_backward
	FlagNamespaces             AttrFlags = 1 << 28 // namespaces
	FlagKsymbol                AttrFlags = 1 << 29 // ksymbol
	FlagBPFEvent               AttrFlags = 1 << 30 // bpf_event
	FlagAuxOutput              AttrFlags = 1 << 31 // aux_output
	FlagCgroup                 AttrFlags = 1 << 32 // cgroup
	FlagTextPoke               AttrFlags = 1 << 33 // text_poke
	FlagBuildID                AttrFlags = 1 << 34 // build_id
	FlagInheritThread          AttrFlags = 1 << 35 // inherit_thread
	FlagRemoveOnExec           AttrFlags = 1 << 36 // remove_on_exec
	FlagSigtrap                AttrFlags = 1 << 37 // sigtrap
)

// PreciseIP returns the 2-bit precise_ip field (0: arbitrary skid ... 3: zero skid).
func (f AttrFlags) PreciseIP() int { return int(f&FlagPreciseIPMask) >> 15 }

// WithPreciseIP returns f with precise_ip set to n (0..3).
func (f AttrFlags) WithPreciseIP(n int) AttrFlags {
	return f&^FlagPreciseIPMask | AttrFlags(n&3)<<15
}

// appendAttr appends a in its uapi layout, AttrSize bytes with size = AttrSize.
func appendAttr(dst []byte, a *Attr) ([]byte, error) {
	if a.Config3 != 0 {
		return dst, fmt.Errorf("config3 %#x needs attr size %d, which perf 6.1 refuses", a.Config3, attrSizeVer8)
	}
	dst = le.AppendUint32(dst, a.Type)   // type
	dst = le.AppendUint32(dst, AttrSize) // size
	dst = le.AppendUint64(dst, a.Config) // config
	dst = le.AppendUint64(dst, a.SamplePeriodOrFreq)
	dst = le.AppendUint64(dst, uint64(a.SampleType))
	dst = le.AppendUint64(dst, uint64(a.ReadFormat))
	dst = le.AppendUint64(dst, uint64(a.Flags))
	dst = le.AppendUint32(dst, a.WakeupEventsOrWatermark)
	dst = le.AppendUint32(dst, a.BPType)           // bp_type
	dst = le.AppendUint64(dst, a.Config1)          // config1 (offset 56)
	dst = le.AppendUint64(dst, a.Config2)          // config2 (64, end of VER0)
	dst = le.AppendUint64(dst, a.BranchSampleType) // branch_sample_type (72)
	dst = le.AppendUint64(dst, a.SampleRegsUser)   // sample_regs_user (80)
	dst = le.AppendUint32(dst, a.SampleStackUser)  // sample_stack_user (88)
	dst = le.AppendUint32(dst, uint32(a.ClockID))  // clockid (92)
	dst = le.AppendUint64(dst, a.SampleRegsIntr)   // sample_regs_intr (96)
	dst = le.AppendUint32(dst, a.AuxWatermark)     // aux_watermark (104)
	dst = le.AppendUint16(dst, a.SampleMaxStack)   // sample_max_stack (108)
	dst = le.AppendUint16(dst, 0)                  // __reserved_2
	dst = le.AppendUint32(dst, a.AuxSampleSize)    // aux_sample_size (112)
	dst = le.AppendUint32(dst, 0)                  // __reserved_3
	dst = le.AppendUint64(dst, a.SigData)          // sig_data (120)
	return dst, nil
}

// decodeAttr decodes the first len(b) bytes of a struct perf_event_attr.
// Fields past the end of b are zero, as the kernel treats a short struct.
func decodeAttr(b []byte) Attr {
	var a Attr
	d := &decoder{b: b}
	// Each group of fields is read only if the struct is long enough to hold it.
	a.Type = d.u32()                    // type
	a.Size = d.u32()                    // size
	a.Config = d.u64()                  // config
	a.SamplePeriodOrFreq = d.u64()      // sample_period / sample_freq
	a.SampleType = SampleType(d.u64())  // sample_type
	a.ReadFormat = ReadFormat(d.u64())  // read_format
	a.Flags = AttrFlags(d.u64())        // disabled ... sigtrap
	a.WakeupEventsOrWatermark = d.u32() // wakeup_events / wakeup_watermark
	a.BPType = d.u32()                  // bp_type
	a.Config1 = d.u64()                 // bp_addr / config1
	a.Config2 = d.u64()                 // bp_len / config2 (VER1 ends at 72)
	a.BranchSampleType = d.u64()        // branch_sample_type (VER2 ends at 80)
	a.SampleRegsUser = d.u64()          // sample_regs_user
	a.SampleStackUser = d.u32()         // sample_stack_user
	a.ClockID = int32(d.u32())          // clockid (VER3 ends at 96)
	a.SampleRegsIntr = d.u64()          // sample_regs_intr (VER4 ends at 104)
	a.AuxWatermark = d.u32()            // aux_watermark
	a.SampleMaxStack = d.u16()          // sample_max_stack
	d.u16()                             // __reserved_2 (VER5 ends at 112)
	a.AuxSampleSize = d.u32()           // aux_sample_size
	d.u32()                             // __reserved_3 (VER6 ends at 120)
	a.SigData = d.u64()                 // sig_data (VER7 ends at 128)
	a.Config3 = d.u64()                 // config3 (VER8 ends at 136)
	return a
}

// trailerSize is the size of the sample_id trailer of non-SAMPLE records
// (struct sample_id): zero unless FlagSampleIDAll.
func (a *Attr) trailerSize() int {
	if a.Flags&FlagSampleIDAll == 0 {
		return 0
	}
	n := 0
	for _, f := range []SampleType{SampleTID, SampleTime, SampleID, SampleStreamID, SampleCPU, SampleIdentifier} {
		if a.SampleType&f != 0 {
			n += 8
		}
	}
	return n
}

// regsCount is the number of registers a REGS_USER/REGS_INTR block holds for mask.
func regsCount(mask uint64) int { return bits.OnesCount64(mask) }
