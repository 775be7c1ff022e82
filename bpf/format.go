package bpf

import (
	perf "github.com/elastic/go-perf"
	"golang.org/x/sys/unix"
)

// OutputFormat is how the bpf-output event lays out the records Run
// delivers, in perf_event_attr's terms (the uapi's bits): what a decoder
// of them needs, and what a perf.data of them records. Side-band records
// come from another event whose sample_id has the same layout (TID, TIME,
// CPU), as perf requires of the events of one file.
type OutputFormat struct {
	Type            uint32 // type: PERF_TYPE_SOFTWARE
	Config          uint64 // config: PERF_COUNT_SW_BPF_OUTPUT
	SamplePeriod    uint64 // sample_period
	SampleType      uint64 // sample_type: PERF_SAMPLE_* bits
	Bits            uint64 // the bit-field word: sample_id_all, exclude_callchain_user, ...
	SampleRegsUser  uint64 // sample_regs_user
	SampleStackUser uint32 // sample_stack_user
}

// FormatOf is the format of the bpf-output event a Sampler opened with
// opts writes.
func FormatOf(opts Options) OutputFormat { return outputFormat(outputAttr(opts)) }

// OutputFormat is the format of the bpf-output event, as the Sampler
// opened it.
func (s *Sampler) OutputFormat() OutputFormat { return outputFormat(s.attr) }

// outputFormat is a, as the kernel gets it: the fields a sampling event's
// records are laid out by.
func outputFormat(a perf.Attr) OutputFormat {
	f := a.SampleFormat
	out := OutputFormat{Type: uint32(a.Type), Config: a.Config, SamplePeriod: a.Sample,
		SampleRegsUser: a.SampleRegistersUser, SampleStackUser: a.SampleStackUser}
	for _, b := range []struct {
		on  bool
		bit uint64
	}{
		{f.IP, unix.PERF_SAMPLE_IP}, {f.Tid, unix.PERF_SAMPLE_TID}, {f.Time, unix.PERF_SAMPLE_TIME},
		{f.Addr, unix.PERF_SAMPLE_ADDR}, {f.Count, unix.PERF_SAMPLE_READ}, {f.Callchain, unix.PERF_SAMPLE_CALLCHAIN},
		{f.ID, unix.PERF_SAMPLE_ID}, {f.CPU, unix.PERF_SAMPLE_CPU}, {f.Period, unix.PERF_SAMPLE_PERIOD},
		{f.StreamID, unix.PERF_SAMPLE_STREAM_ID}, {f.Raw, unix.PERF_SAMPLE_RAW},
		{f.BranchStack, unix.PERF_SAMPLE_BRANCH_STACK}, {f.UserRegisters, unix.PERF_SAMPLE_REGS_USER},
		{f.UserStack, unix.PERF_SAMPLE_STACK_USER}, {f.Weight, unix.PERF_SAMPLE_WEIGHT},
		{f.DataSource, unix.PERF_SAMPLE_DATA_SRC}, {f.Identifier, unix.PERF_SAMPLE_IDENTIFIER},
		{f.Transaction, unix.PERF_SAMPLE_TRANSACTION}, {f.IntrRegisters, unix.PERF_SAMPLE_REGS_INTR},
		{f.PhysicalAddress, unix.PERF_SAMPLE_PHYS_ADDR},
	} {
		if b.on {
			out.SampleType |= b.bit
		}
	}
	for _, b := range []struct {
		on  bool
		bit uint64
	}{
		{a.Options.Freq, unix.PerfBitFreq}, {a.Options.SampleIDAll, unix.PerfBitSampleIDAll},
		{a.Options.ExcludeUserCallchain, unix.PerfBitExcludeCallchainUser},
		{a.Options.ExcludeKernelCallchain, unix.PerfBitExcludeCallchainKernel},
	} {
		if b.on {
			out.Bits |= b.bit
		}
	}
	return out
}
