package bpf

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Sample is a PERF_RECORD_SAMPLE of the bpf-output event, decoded by the
// sample_type the Sampler opens it with: IP|TID|TIME|CPU|PERIOD|CALLCHAIN|
// RAW, then REGS_USER|STACK_USER unless Options.StackSize is 0, in the
// kernel's order (perf_output_sample).
type Sample struct {
	IP        uint64
	PID, TID  uint32
	Time      uint64
	CPU       uint32
	Period    uint64
	Callchain []uint64
	Raw       []byte
	RegsABI   uint64
	Regs      []uint64 // UserRegisters, in mask order
	Stack     []byte   // the user stack copy, cut to its dynamic size
}

// maxCallchain bounds a callchain (perf_event_max_stack is 127 by default;
// the kernel's hard limit is far lower than this).
const maxCallchain = 1 << 16

// periodOffset is where PERF_SAMPLE_PERIOD sits in a sample's data: after
// IP, TID (pid, tid), TIME and CPU (cpu, res).
const periodOffset = 32

// SetPeriod writes period into a sample record's data. The kernel gives a
// bpf-output record no period; the cpu-clock period it stands for comes in
// the payload, and perf tools (and flame graphs) weigh samples by it.
func SetPeriod(data []byte, period uint64) {
	if len(data) >= periodOffset+8 {
		binary.LittleEndian.PutUint64(data[periodOffset:], period)
	}
}

// DecodeSample decodes the data of a sample record (after its header).
func DecodeSample(data []byte) (*Sample, error) {
	d := decoder{b: data}
	s := &Sample{}
	s.IP = d.u64()                                                // PERF_SAMPLE_IP
	s.PID, s.TID = d.u32(), d.u32()                               // PERF_SAMPLE_TID
	s.Time = d.u64()                                              // PERF_SAMPLE_TIME
	s.CPU, _ = d.u32(), d.u32()                                   // PERF_SAMPLE_CPU: cpu, res
	s.Period = d.u64()                                            // PERF_SAMPLE_PERIOD
	if n := d.u64(); n > maxCallchain || n*8 > uint64(len(d.b)) { // PERF_SAMPLE_CALLCHAIN
		return nil, fmt.Errorf("sample: callchain of %d entries", n)
	} else {
		s.Callchain = make([]uint64, n)
		for i := range s.Callchain {
			s.Callchain[i] = d.u64()
		}
	}
	s.Raw = d.bytes(uint64(d.u32())) // PERF_SAMPLE_RAW
	if d.err == nil && len(d.b) == 0 {
		return s, nil // opened without a stack copy: RAW ends the record
	}
	s.RegsABI = d.u64() // PERF_SAMPLE_REGS_USER
	if s.RegsABI != 0 {
		s.Regs = make([]uint64, bits.OnesCount64(UserRegisters))
		for i := range s.Regs {
			s.Regs[i] = d.u64()
		}
	}
	if size := d.u64(); size > 0 { // PERF_SAMPLE_STACK_USER
		stack := d.bytes(size)
		dyn := d.u64()
		if dyn < uint64(len(stack)) {
			stack = stack[:dyn]
		}
		s.Stack = stack
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("sample: %d bytes wanted, %d left", n, len(d.b))
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
