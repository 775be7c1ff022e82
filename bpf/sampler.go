package bpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	perf "github.com/elastic/go-perf"
)

// Options configure sampling.
type Options struct {
	Frequency int // samples per second per CPU (perf's -F)
	// RingPages is the size of each CPU's ring of samples in pages (a power
	// of two); 0 sizes it by the number of CPUs (RingPagesFor). A sample with
	// a deep stack and a stack copy takes up to 64 KiB.
	RingPages int
	// StackSize is how many bytes of the user stack each sample copies, for
	// native unwinding afterwards (perf's --call-graph dwarf,SIZE).
	StackSize uint32
}

// DefaultOptions are perf's defaults where perf has one.
var DefaultOptions = Options{Frequency: 99, StackSize: 8192}

// Ring budgets: what all CPUs' rings may take together, and the bounds of
// one CPU's ring. A ring holds what arrives while the reader is not running;
// on a loaded machine that can be a tenth of a second, about 100 samples
// with 8 KiB stack copies at 999 Hz.
const (
	sampleRingBudget   = 32 << 20
	sampleRingMax      = 2 << 20
	sampleRingMin      = 256 << 10
	sideBandRingBudget = 16 << 20
	sideBandRingMax    = 1 << 20
	sideBandRingMin    = 64 << 10
)

// RingPagesFor is the largest power-of-two number of pages per CPU within
// budget over ncpu rings, clamped to [min, max] bytes.
func RingPagesFor(ncpu, budget, lo, hi int) int {
	page := os.Getpagesize()
	per := hi
	if ncpu > 0 {
		per = min(hi, budget/ncpu)
	}
	per = max(per, lo)
	pages := 1
	for pages*2*page <= per {
		pages *= 2
	}
	return pages
}

// UserRegisters is the register set each sample copies: on x86_64 every
// general-purpose register perf's DWARF unwinder uses (PERF_REG_X86_64 mask
// 0xff0fff: AX..IP without the segment registers, R8..R15).
const UserRegisters = 0xff0fff

// Sampler samples Ruby stacks on every CPU.
type Sampler struct {
	objs    rubyObjects
	outputs []*perf.Event // per-CPU bpf-output events, read by the user
	clocks  []*perf.Event // per-CPU cpu-clock events running the program
	// per-CPU dummy events reporting COMM, MMAP2, FORK and EXIT of every
	// process, with the same sample_id trailer (TID|TIME|CPU) as samples
	trackers []*perf.Event
	cpus     []int
	attr     perf.Attr
}

// Record is one raw record read from a CPU's ring: its header and data,
// exactly as the kernel wrote them.
type Record struct {
	CPU int
	// SideBand: the record comes from the ring of COMM, MMAP2, FORK and EXIT
	// records of every process, not from the ring of samples.
	SideBand bool
	Header   perf.RecordHeader
	Data     []byte
}

// Open loads the program and starts sampling on every online CPU. No
// process is a target until AddProcess.
func Open(opts Options) (_ *Sampler, err error) {
	if opts.Frequency <= 0 {
		return nil, fmt.Errorf("sampling frequency %d: must be positive", opts.Frequency)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("memlock: %w", err)
	}
	spec, err := loadRuby()
	if err != nil {
		return nil, fmt.Errorf("load BPF spec: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	spec.Maps["scratch"].MaxEntries = uint32(ncpu)
	spec.Maps["events"].MaxEntries = uint32(ncpu)
	s := &Sampler{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load BPF program: %v", ve)
		}
		return nil, fmt.Errorf("load BPF program: %w", err)
	}
	s.cpus, err = onlineCPUs()
	if err != nil {
		return nil, err
	}
	if opts.RingPages <= 0 {
		opts.RingPages = RingPagesFor(len(s.cpus), sampleRingBudget, sampleRingMin, sampleRingMax)
	}
	sideBandPages := RingPagesFor(len(s.cpus), sideBandRingBudget, sideBandRingMin, sideBandRingMax)
	s.attr = perf.Attr{
		Label:  "ruby-cpu",
		Type:   perf.SoftwareEvent,
		Config: uint64(perf.BPFOutput),
		SampleFormat: perf.SampleFormat{
			IP: true, Tid: true, Time: true, CPU: true, Period: true, Callchain: true, Raw: true,
			UserRegisters: true, UserStack: true,
		},
		// User frames come from unwinding the stack copy (as with perf's
		// --call-graph dwarf): without frame pointers the kernel's user
		// callchain is only the leaf, and perf would show it twice.
		Options:             perf.Options{SampleIDAll: true, ExcludeUserCallchain: true},
		SampleRegistersUser: UserRegisters,
		SampleStackUser:     opts.StackSize,
	}
	s.attr.SetSamplePeriod(1)
	s.attr.SetWakeupEvents(1)
	track := perf.Attr{
		Label: "tracking", Type: perf.SoftwareEvent, Config: uint64(perf.Dummy),
		SampleFormat: perf.SampleFormat{Tid: true, Time: true, CPU: true},
		Options: perf.Options{SampleIDAll: true, Mmap: true, Mmap2: true, MmapData: true, Comm: true,
			CommExec: true, Task: true},
	}
	// wakeup_events counts samples only: side-band records (COMM, MMAP2,
	// EXIT) would wait until the ring fills. Wake on any byte instead.
	track.SetWakeupWatermark(1)
	clock := perf.Attr{Type: perf.SoftwareEvent, Config: uint64(perf.CPUClock), Options: perf.Options{Disabled: true}}
	clock.SetSampleFreq(uint64(opts.Frequency))
	for _, cpu := range s.cpus {
		out, err := perf.Open(&s.attr, perf.AllThreads, cpu, nil)
		if err != nil {
			return nil, fmt.Errorf("open bpf-output event on CPU %d: %w", cpu, err)
		}
		s.outputs = append(s.outputs, out)
		if err := out.MapRingNumPages(opts.RingPages); err != nil {
			return nil, fmt.Errorf("map ring of CPU %d: %w", cpu, err)
		}
		fd, err := out.FD()
		if err != nil {
			return nil, err
		}
		if err := s.objs.Events.Update(uint32(cpu), uint32(fd), ebpf.UpdateAny); err != nil {
			return nil, fmt.Errorf("events map, CPU %d: %w", cpu, err)
		}
		tr, err := perf.Open(&track, perf.AllThreads, cpu, nil)
		if err != nil {
			return nil, fmt.Errorf("open tracking event on CPU %d: %w", cpu, err)
		}
		s.trackers = append(s.trackers, tr)
		// Every process on the machine writes here: process starts and
		// library loads come in bursts, and a lost MMAP2 of a target leaves
		// its native frames unnamed. 64 KiB lost records while a Ruby
		// started; 1 MiB lost none.
		if err := tr.MapRingNumPages(sideBandPages); err != nil {
			return nil, fmt.Errorf("map tracking ring of CPU %d: %w", cpu, err)
		}
		ck, err := perf.Open(&clock, perf.AllThreads, cpu, nil)
		if err != nil {
			return nil, fmt.Errorf("open cpu-clock event on CPU %d: %w", cpu, err)
		}
		s.clocks = append(s.clocks, ck)
		if err := ck.SetBPF(uint32(s.objs.SampleRuby.FD())); err != nil {
			return nil, fmt.Errorf("attach BPF program to CPU %d: %w", cpu, err)
		}
		if err := ck.Enable(); err != nil {
			return nil, fmt.Errorf("enable cpu-clock on CPU %d: %w", cpu, err)
		}
	}
	return s, nil
}

// OutputAttr is the bpf-output event's attribute: the layout of every sample
// record Run delivers.
func (s *Sampler) OutputAttr() perf.Attr { return s.attr }

// AddProcess makes pid a target.
func (s *Sampler) AddProcess(pid int, cfg ProcessConfig) error {
	if err := s.objs.Procs.Update(uint32(pid), cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("pid %d: add to the BPF target map: %w", pid, err)
	}
	return nil
}

// RemoveProcess stops sampling pid.
func (s *Sampler) RemoveProcess(pid int) {
	s.objs.Procs.Delete(uint32(pid))
}

// Stop stops sampling; records already in the rings can still be read.
func (s *Sampler) Stop() {
	for _, c := range s.clocks {
		c.Disable()
	}
}

// Run reads every CPU's rings (samples, and COMM/MMAP2/FORK/EXIT of every
// process) until ctx ends and the rings are drained, handing each record to
// fn. fn is never called concurrently.
func (s *Sampler) Run(ctx context.Context, fn func(Record) error) error {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		firstMu sync.Mutex
		first   error
	)
	fail := func(err error) {
		firstMu.Lock()
		if first == nil {
			first = err
		}
		firstMu.Unlock()
	}
	rings := append(append([]*perf.Event{}, s.outputs...), s.trackers...)
	for i, ev := range rings {
		wg.Add(1)
		sideBand := i >= len(s.outputs)
		go func(cpu int, ev *perf.Event) {
			defer wg.Done()
			var raw perf.RawRecord
			for {
				err := ev.ReadRawRecord(ctx, &raw)
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("read ring of CPU %d: %w", cpu, err))
						return
					}
					// Drain what is left after the end.
					for ev.HasRecord() {
						if err := ev.ReadRawRecord(context.Background(), &raw); err != nil {
							return
						}
						mu.Lock()
						err = fn(Record{CPU: cpu, SideBand: sideBand, Header: raw.Header, Data: raw.Data})
						mu.Unlock()
						if err != nil {
							fail(err)
							return
						}
					}
					return
				}
				mu.Lock()
				err = fn(Record{CPU: cpu, SideBand: sideBand, Header: raw.Header, Data: raw.Data})
				mu.Unlock()
				if err != nil {
					fail(err)
					return
				}
			}
		}(s.cpus[i%len(s.cpus)], ev)
	}
	wg.Wait()
	return first
}

// Counts are the program's own counters.
type Counts struct {
	Samples      uint64 // samples of target processes
	OutputErrors uint64 // records the kernel would not take (ring full)
	Truncated    uint64 // stacks deeper than MaxFrames
}

// Counts sums the program's per-CPU counters.
func (s *Sampler) Counts() (Counts, error) {
	var c Counts
	for i, dst := range []*uint64{&c.Samples, &c.OutputErrors, &c.Truncated} {
		var per []uint64
		if err := s.objs.Counts.Lookup(uint32(i), &per); err != nil {
			return c, err
		}
		for _, v := range per {
			*dst += v
		}
	}
	return c, nil
}

// Close stops sampling and releases everything.
func (s *Sampler) Close() error {
	for _, c := range s.clocks {
		c.Disable()
		c.Close()
	}
	for _, o := range append(s.outputs, s.trackers...) {
		o.Close()
	}
	if s.objs.SampleRuby == nil {
		return nil // the program was never loaded
	}
	return s.objs.Close()
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z := a
		var err2 error
		if found {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a || z-a > 1<<16 {
			return nil, fmt.Errorf("online CPUs: cannot read %q", part)
		}
		for c := a; c <= z; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
