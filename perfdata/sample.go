package perfdata

import (
	"errors"
	"fmt"
	"iter"
)

// Sample is PERF_RECORD_SAMPLE. Each field is set only if its PERF_SAMPLE_*
// bit is in the event's Attr.SampleType; the comments give the uapi names.
type Sample struct {
	// Event is the index of the sample's event in the Reader's Events:
	// found by ID when there are several events, 0 when there is one, -1
	// when the ID matches none (the sample is then decoded with the first
	// event's layout, as perf requires all events to agree on it).
	// The Writer ignores it.
	Event int

	Misc     Misc   // header.misc: CPU mode of IP, MiscExactIP
	ID       uint64 // PERF_SAMPLE_IDENTIFIER or PERF_SAMPLE_ID: id
	IP       uint64 // PERF_SAMPLE_IP: ip
	Pid, Tid uint32 // PERF_SAMPLE_TID: pid, tid
	Time     uint64 // PERF_SAMPLE_TIME: time
	Addr     uint64 // PERF_SAMPLE_ADDR: addr
	StreamID uint64 // PERF_SAMPLE_STREAM_ID: stream_id
	CPU      uint32 // PERF_SAMPLE_CPU: cpu (the reserved u32 after it is dropped)
	Period   uint64 // PERF_SAMPLE_PERIOD: period

	Read ReadValues // PERF_SAMPLE_READ: struct read_format

	// Callchain is PERF_SAMPLE_CALLCHAIN ips[nr], leaf first, including
	// the kernel's context markers (ContextKernel, ContextUser, ...).
	Callchain []uint64

	// Raw is PERF_SAMPLE_RAW data[size]. The kernel pads it with zeros so
	// that 4+size is a multiple of 8, and the padding is part of Raw: the
	// payload must carry its own length. The Writer pads the same way.
	Raw []byte

	BranchHWIndex uint64        // PERF_SAMPLE_BRANCH_STACK hw_idx, when BranchSampleType has BranchHWIndex
	Branches      []BranchEntry // PERF_SAMPLE_BRANCH_STACK entries[nr]

	// RegsUserABI is PERF_SAMPLE_REGS_USER abi (RegsABINone, RegsABI32,
	// RegsABI64); RegsUser holds one value per bit of Attr.SampleRegsUser,
	// lowest bit first, and is empty when the ABI is RegsABINone (a sample
	// of a kernel thread).
	RegsUserABI uint64
	RegsUser    []uint64

	// StackUser is PERF_SAMPLE_STACK_USER data cut to dyn_size, the bytes
	// the kernel actually copied from the user stack (starting at the user
	// stack pointer); StackUserSize is the size the record reserved for it.
	StackUser     []byte
	StackUserSize uint64

	Weight      uint64 // PERF_SAMPLE_WEIGHT or PERF_SAMPLE_WEIGHT_STRUCT: weight
	DataSrc     uint64 // PERF_SAMPLE_DATA_SRC: data_src
	Transaction uint64 // PERF_SAMPLE_TRANSACTION: transaction

	RegsIntrABI uint64   // PERF_SAMPLE_REGS_INTR abi
	RegsIntr    []uint64 // PERF_SAMPLE_REGS_INTR regs, one per bit of Attr.SampleRegsIntr

	PhysAddr     uint64 // PERF_SAMPLE_PHYS_ADDR: phys_addr
	Cgroup       uint64 // PERF_SAMPLE_CGROUP: cgroup id
	DataPageSize uint64 // PERF_SAMPLE_DATA_PAGE_SIZE: data_page_size
	CodePageSize uint64 // PERF_SAMPLE_CODE_PAGE_SIZE: code_page_size
	Aux          []byte // PERF_SAMPLE_AUX: data[size]
}

// ReadValues is PERF_SAMPLE_READ (struct read_format): the counter values,
// one, or one per group member when Attr.ReadFormat has ReadGroup.
type ReadValues struct {
	TimeEnabled uint64    // time_enabled (ReadTotalTimeEnabled)
	TimeRunning uint64    // time_running (ReadTotalTimeRunning)
	Counters    []Counter // value, id, lost
}

// Counter is one counter value in ReadValues.
type Counter struct {
	Value uint64 // value
	ID    uint64 // id (ReadID)
	Lost  uint64 // lost (ReadLost)
}

// BranchEntry is struct perf_branch_entry; Flags holds the bit-fields
// mispred, predicted, in_tx, abort, cycles, type, ...
type BranchEntry struct {
	From, To, Flags uint64
}

// Register ABIs of PERF_SAMPLE_REGS_USER / REGS_INTR (enum perf_sample_regs_abi).
const (
	RegsABINone = 0 // PERF_SAMPLE_REGS_ABI_NONE: no registers follow
	RegsABI32   = 1 // PERF_SAMPLE_REGS_ABI_32
	RegsABI64   = 2 // PERF_SAMPLE_REGS_ABI_64
)

// Callchain context markers (enum perf_callchain_context): entries of
// Sample.Callchain that say in which mode the following addresses lie.
const (
	ContextHV          uint64 = 1<<64 - 32   // PERF_CONTEXT_HV
	ContextKernel      uint64 = 1<<64 - 128  // PERF_CONTEXT_KERNEL
	ContextUser        uint64 = 1<<64 - 512  // PERF_CONTEXT_USER
	ContextGuest       uint64 = 1<<64 - 2048 // PERF_CONTEXT_GUEST
	ContextGuestKernel uint64 = 1<<64 - 2176 // PERF_CONTEXT_GUEST_KERNEL
	ContextGuestUser   uint64 = 1<<64 - 2560 // PERF_CONTEXT_GUEST_USER
	ContextMax         uint64 = 1<<64 - 4095 // PERF_CONTEXT_MAX: entries at or above it are markers
)

// CallchainIn yields the addresses of callchain that lie in context ctx
// (ContextKernel, ContextUser, ...): those after a ctx marker, up to the
// next marker.
func CallchainIn(callchain []uint64, ctx uint64) iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		in := false
		for _, ip := range callchain {
			if ip >= ContextMax {
				in = ip == ctx
				continue
			}
			if in && !yield(ip) {
				return
			}
		}
	}
}

// sampleIDOffset returns where a SAMPLE record body holds its event id
// for sample type st, or -1 if it has none (perf's evsel id_pos).
func sampleIDOffset(st SampleType) int {
	if st&SampleIdentifier != 0 {
		return 0
	}
	if st&SampleID == 0 {
		return -1
	}
	off := 0
	for _, f := range []SampleType{SampleIP, SampleTID, SampleTime, SampleAddr} {
		if st&f != 0 {
			off += 8
		}
	}
	return off
}

// SetSamplePeriod writes period into raw, a whole SAMPLE record (header
// included) of an event with attr a, in place: where its PERF_SAMPLE_PERIOD
// lies, after the fixed fields before it in perf_output_sample's order.
func SetSamplePeriod(raw []byte, a *Attr, period uint64) error {
	st := a.SampleType
	if st&SamplePeriod == 0 {
		return errors.New("SAMPLE: the event records no period")
	}
	off := recordHeaderSize
	for _, f := range []SampleType{SampleIdentifier, SampleIP, SampleTID, SampleTime, SampleAddr, SampleID, SampleStreamID, SampleCPU} {
		if st&f != 0 {
			off += 8
		}
	}
	if len(raw) < off+8 || RecordType(le.Uint32(raw)) != RecordSample {
		return fmt.Errorf("SAMPLE: a record of %d bytes has no period at byte %d", len(raw), off)
	}
	le.PutUint64(raw[off:], period)
	return nil
}

// reset clears s for decoding another sample into it, keeping the storage
// of its lists.
func (s *Sample) reset() *Sample {
	*s = Sample{Callchain: s.Callchain[:0], Branches: s.Branches[:0], RegsUser: s.RegsUser[:0],
		RegsIntr: s.RegsIntr[:0], Read: ReadValues{Counters: s.Read.Counters[:0]}}
	return s
}

// decodeSample decodes a SAMPLE body (after the header) into s, a new or
// reset Sample whose lists' storage it reuses, in the order of the
// kernel's perf_output_sample.
func decodeSample(s *Sample, body []byte, misc Misc, a *Attr, ev int) error {
	st := a.SampleType
	if st&^sampleKnown != 0 {
		return fmt.Errorf("SAMPLE: unknown sample_type bits %#x", uint64(st&^sampleKnown))
	}
	s.Event, s.Misc = ev, misc
	d := &decoder{b: body}
	if st&SampleIdentifier != 0 {
		s.ID = d.u64() // id
	}
	if st&SampleIP != 0 {
		s.IP = d.u64() // ip
	}
	if st&SampleTID != 0 {
		s.Pid, s.Tid = d.u32(), d.u32() // pid, tid
	}
	if st&SampleTime != 0 {
		s.Time = d.u64() // time
	}
	if st&SampleAddr != 0 {
		s.Addr = d.u64() // addr
	}
	if st&SampleID != 0 {
		s.ID = d.u64() // id
	}
	if st&SampleStreamID != 0 {
		s.StreamID = d.u64() // stream_id
	}
	if st&SampleCPU != 0 {
		s.CPU = d.u32() // cpu
		d.u32()         // res
	}
	if st&SamplePeriod != 0 {
		s.Period = d.u64() // period
	}
	if st&SampleRead != 0 {
		s.Read = decodeRead(d, a.ReadFormat, s.Read.Counters)
	}
	if st&SampleCallchain != 0 {
		s.Callchain = d.u64s(s.Callchain, d.count(8)) // nr, ips[nr]
	}
	if st&SampleRaw != 0 {
		s.Raw = d.bytes(int(d.u32())) // size, data[size]
	}
	if st&SampleBranchStack != 0 {
		n := d.count(24) // nr
		if a.BranchSampleType&BranchHWIndex != 0 {
			s.BranchHWIndex = d.u64() // hw_idx
			if d.err == nil && n > d.left()/24 {
				d.err = fmt.Errorf("branch stack of %d entries exceeds the record", n)
			}
		}
		if d.err == nil {
			s.Branches = grow(s.Branches, n)
			for i := range s.Branches {
				s.Branches[i] = BranchEntry{d.u64(), d.u64(), d.u64()} // from, to, flags
			}
		}
	}
	if st&SampleRegsUser != 0 {
		s.RegsUserABI, s.RegsUser = decodeRegs(d, a.SampleRegsUser, s.RegsUser)
	}
	if st&SampleStackUser != 0 {
		s.StackUserSize = d.u64() // size
		if s.StackUserSize > uint64(d.left()) {
			d.err = fmt.Errorf("user stack of %d bytes exceeds the record", s.StackUserSize)
		} else if s.StackUserSize > 0 {
			data := d.bytes(int(s.StackUserSize)) // data[size]
			dyn := d.u64()                        // dyn_size
			if d.err == nil && dyn > s.StackUserSize {
				d.err = fmt.Errorf("user stack dyn_size %d exceeds its size %d", dyn, s.StackUserSize)
			} else if d.err == nil {
				s.StackUser = data[:dyn]
			}
		}
	}
	if st&(SampleWeight|SampleWeightStruct) != 0 {
		s.Weight = d.u64() // weight (or union perf_sample_weight)
	}
	if st&SampleDataSrc != 0 {
		s.DataSrc = d.u64() // data_src
	}
	if st&SampleTransaction != 0 {
		s.Transaction = d.u64() // transaction
	}
	if st&SampleRegsIntr != 0 {
		s.RegsIntrABI, s.RegsIntr = decodeRegs(d, a.SampleRegsIntr, s.RegsIntr)
	}
	if st&SamplePhysAddr != 0 {
		s.PhysAddr = d.u64() // phys_addr
	}
	if st&SampleCgroup != 0 {
		s.Cgroup = d.u64() // cgroup
	}
	if st&SampleDataPageSize != 0 {
		s.DataPageSize = d.u64() // data_page_size
	}
	if st&SampleCodePageSize != 0 {
		s.CodePageSize = d.u64() // code_page_size
	}
	if st&SampleAux != 0 {
		n := d.u64() // size
		if n > uint64(d.left()) {
			d.err = fmt.Errorf("aux data of %d bytes exceeds the record", n)
		} else {
			s.Aux = d.bytes(int(n)) // data[size]
		}
	}
	if d.err != nil {
		return fmt.Errorf("SAMPLE: %w", d.err)
	}
	return nil
}

// decodeRead decodes struct read_format for format f, its counters into
// the storage of into.
func decodeRead(d *decoder, f ReadFormat, into []Counter) ReadValues {
	var r ReadValues
	per := 8 // bytes per value entry
	if f&ReadID != 0 {
		per += 8
	}
	if f&ReadLost != 0 {
		per += 8
	}
	n := 1
	if f&ReadGroup != 0 {
		n = d.count(per) // nr
	}
	if f&ReadTotalTimeEnabled != 0 {
		r.TimeEnabled = d.u64() // time_enabled
	}
	if f&ReadTotalTimeRunning != 0 {
		r.TimeRunning = d.u64() // time_running
	}
	if d.err != nil || n > d.left()/per {
		d.need(n * per) // records the error
		return r
	}
	r.Counters = grow(into, n)
	for i := range r.Counters {
		v := &r.Counters[i]
		v.Value = d.u64() // value
		if f&ReadID != 0 {
			v.ID = d.u64() // id
		}
		if f&ReadLost != 0 {
			v.Lost = d.u64() // lost
		}
	}
	return r
}

// decodeRegs decodes a REGS_USER/REGS_INTR block: abi, then one u64 per
// bit of mask unless abi is RegsABINone, into the storage of into.
func decodeRegs(d *decoder, mask uint64, into []uint64) (uint64, []uint64) {
	abi := d.u64() // abi
	if abi == RegsABINone || d.err != nil {
		return abi, nil
	}
	return abi, d.u64s(into, regsCount(mask)) // regs[weight(mask)]
}

// appendSample appends the body of s for attr a, the mirror of decodeSample.
func appendSample(dst []byte, a *Attr, s *Sample) ([]byte, error) {
	st := a.SampleType
	if st&^sampleKnown != 0 {
		return dst, fmt.Errorf("SAMPLE: unknown sample_type bits %#x", uint64(st&^sampleKnown))
	}
	u64 := le.AppendUint64
	if st&SampleIdentifier != 0 {
		dst = u64(dst, s.ID)
	}
	if st&SampleIP != 0 {
		dst = u64(dst, s.IP)
	}
	if st&SampleTID != 0 {
		dst = le.AppendUint32(dst, s.Pid)
		dst = le.AppendUint32(dst, s.Tid)
	}
	if st&SampleTime != 0 {
		dst = u64(dst, s.Time)
	}
	if st&SampleAddr != 0 {
		dst = u64(dst, s.Addr)
	}
	if st&SampleID != 0 {
		dst = u64(dst, s.ID)
	}
	if st&SampleStreamID != 0 {
		dst = u64(dst, s.StreamID)
	}
	if st&SampleCPU != 0 {
		dst = le.AppendUint32(dst, s.CPU)
		dst = le.AppendUint32(dst, 0)
	}
	if st&SamplePeriod != 0 {
		dst = u64(dst, s.Period)
	}
	if st&SampleRead != 0 {
		f := a.ReadFormat
		vals := s.Read.Counters
		if f&ReadGroup != 0 {
			dst = u64(dst, uint64(len(vals)))
		} else if len(vals) != 1 {
			return dst, fmt.Errorf("SAMPLE: read_format without PERF_FORMAT_GROUP needs 1 value, have %d", len(vals))
		}
		if f&ReadTotalTimeEnabled != 0 {
			dst = u64(dst, s.Read.TimeEnabled)
		}
		if f&ReadTotalTimeRunning != 0 {
			dst = u64(dst, s.Read.TimeRunning)
		}
		for _, v := range vals {
			dst = u64(dst, v.Value)
			if f&ReadID != 0 {
				dst = u64(dst, v.ID)
			}
			if f&ReadLost != 0 {
				dst = u64(dst, v.Lost)
			}
		}
	}
	if st&SampleCallchain != 0 {
		dst = u64(dst, uint64(len(s.Callchain)))
		for _, ip := range s.Callchain {
			dst = u64(dst, ip)
		}
	}
	if st&SampleRaw != 0 {
		// As perf_prepare_sample: size = round_up(len + 4, 8) - 4, zero padded.
		raw := s.Raw
		if raw == nil {
			raw = []byte{}
		}
		n := align8(len(raw)+4) - 4
		if n > maxRecordSize {
			return dst, fmt.Errorf("SAMPLE: raw data of %d bytes exceeds a record", len(raw))
		}
		dst = le.AppendUint32(dst, uint32(n))
		dst = append(dst, raw...)
		dst = append(dst, make([]byte, n-len(raw))...)
	}
	if st&SampleBranchStack != 0 {
		dst = u64(dst, uint64(len(s.Branches)))
		if a.BranchSampleType&BranchHWIndex != 0 {
			dst = u64(dst, s.BranchHWIndex)
		}
		for _, b := range s.Branches {
			dst = u64(u64(u64(dst, b.From), b.To), b.Flags)
		}
	}
	if st&SampleRegsUser != 0 {
		var err error
		if dst, err = appendRegs(dst, s.RegsUserABI, s.RegsUser, a.SampleRegsUser); err != nil {
			return dst, fmt.Errorf("SAMPLE: user regs: %w", err)
		}
	}
	if st&SampleStackUser != 0 {
		size := max(s.StackUserSize, uint64(align8(len(s.StackUser))))
		if size > maxRecordSize {
			return dst, fmt.Errorf("SAMPLE: user stack of %d bytes exceeds a record", size)
		}
		dst = u64(dst, size)
		if size > 0 {
			dst = append(dst, s.StackUser...)
			dst = append(dst, make([]byte, int(size)-len(s.StackUser))...)
			dst = u64(dst, uint64(len(s.StackUser))) // dyn_size
		}
	}
	if st&(SampleWeight|SampleWeightStruct) != 0 {
		dst = u64(dst, s.Weight)
	}
	if st&SampleDataSrc != 0 {
		dst = u64(dst, s.DataSrc)
	}
	if st&SampleTransaction != 0 {
		dst = u64(dst, s.Transaction)
	}
	if st&SampleRegsIntr != 0 {
		var err error
		if dst, err = appendRegs(dst, s.RegsIntrABI, s.RegsIntr, a.SampleRegsIntr); err != nil {
			return dst, fmt.Errorf("SAMPLE: intr regs: %w", err)
		}
	}
	if st&SamplePhysAddr != 0 {
		dst = u64(dst, s.PhysAddr)
	}
	if st&SampleCgroup != 0 {
		dst = u64(dst, s.Cgroup)
	}
	if st&SampleDataPageSize != 0 {
		dst = u64(dst, s.DataPageSize)
	}
	if st&SampleCodePageSize != 0 {
		dst = u64(dst, s.CodePageSize)
	}
	if st&SampleAux != 0 {
		dst = u64(dst, uint64(len(s.Aux)))
		dst = append(dst, s.Aux...)
	}
	return dst, nil
}

func appendRegs(dst []byte, abi uint64, regs []uint64, mask uint64) ([]byte, error) {
	dst = le.AppendUint64(dst, abi)
	if abi == RegsABINone {
		if len(regs) != 0 {
			return dst, fmt.Errorf("%d registers with ABI none", len(regs))
		}
		return dst, nil
	}
	if len(regs) != regsCount(mask) {
		return dst, fmt.Errorf("%d registers for a mask of %d", len(regs), regsCount(mask))
	}
	for _, r := range regs {
		dst = le.AppendUint64(dst, r)
	}
	return dst, nil
}
