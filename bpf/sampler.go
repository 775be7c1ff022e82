package bpf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	perf "github.com/elastic/go-perf"
	"github.com/rubyperf/rubyperf/payload"
	"golang.org/x/sys/unix"
)

// Options configure sampling.
type Options struct {
	Frequency int // samples per second per CPU (perf's -F)
	// RingPages is the size of each CPU's ring of samples in pages (a power
	// of two); 0 sizes it by the number of CPUs (RingPagesFor). A sample with
	// a deep stack and a stack copy takes up to 64 KiB.
	RingPages int
	// StackSize is how many bytes of the user stack each sample copies, for
	// native unwinding afterwards (perf's --call-graph dwarf,SIZE): a
	// multiple of 8 up to MaxStackSize. 0 copies neither the stack nor the
	// registers: samples have no native user frames.
	StackSize uint32
	// UnwindRows is the budget of unwind rows for every object's table
	// together (loadRows), 8 bytes each; 0: DefaultUnwindRows.
	UnwindRows int
	// Wall samples the threads of targets that follow it (ProcessConfig.
	// FollowWall) also as they leave a CPU, each such sample weighed by the
	// time the thread stayed off (Record.OffCPUEnd tells it).
	Wall bool
	// Alloc loads the program that samples allocations at the refills of
	// targets' allocation caches (AttachRefills, ProcessConfig.
	// SampleAllocations).
	Alloc bool
	// NoCPU: the cpu-clock events take no samples (a recording of
	// allocations only).
	NoCPU bool
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
	urgentRingBudget   = 16 << 20
	urgentRingMax      = 1 << 20
	urgentRingMin      = 128 << 10
)

// RingPagesFor is the largest power-of-two number of pages per CPU within
// budget over ncpu rings, clamped to lo..hi bytes.
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

// MaxStackSize is the largest stack copy a sample can ask for (the kernel's
// bound, a record being at most 64 KiB; perf's too). The kernel copies less
// when a deep Ruby stack leaves less room in the record.
const MaxStackSize = 65528

// UserRegisters is the register set each sample copies: on x86_64 every
// general-purpose register perf's DWARF unwinder uses (PERF_REG_X86_64 mask
// 0xff0fff: AX..IP without the segment registers, R8..R15).
const UserRegisters = 0xff0fff

// outputAttr is the bpf-output event's attribute, but for its wake-ups.
func outputAttr(opts Options) perf.Attr {
	a := perf.Attr{
		Label:  "ruby-cpu",
		Type:   perf.SoftwareEvent,
		Config: uint64(perf.BPFOutput),
		SampleFormat: perf.SampleFormat{
			IP: true, Tid: true, Time: true, CPU: true, Period: true, Callchain: true, Raw: true,
			UserRegisters: opts.StackSize > 0, UserStack: opts.StackSize > 0,
		},
		// User frames come from unwinding the stack copy (as with perf's
		// --call-graph dwarf): without frame pointers the kernel's user
		// callchain is only the leaf, and perf would show it twice.
		Options:         perf.Options{SampleIDAll: true, ExcludeUserCallchain: true},
		SampleStackUser: opts.StackSize,
	}
	if opts.StackSize > 0 {
		a.SampleRegistersUser = UserRegisters
	}
	a.SetSamplePeriod(1)
	return a
}

// Sampler samples Ruby stacks on every CPU.
type Sampler struct {
	// ringsWait is the epoll file Run waits on while it runs; soon, that
	// DrainSoon cut its wait short.
	ringsWait atomic.Pointer[os.File]
	soon      atomic.Bool

	objs    rubyObjects
	outputs []*perf.Event // per-CPU bpf-output events, read by the user
	// per-CPU bpf-output events for samples with a frame user space has not
	// named yet: each wakes the reader (see urgent_events in ruby.bpf.c)
	urgent []*perf.Event
	clocks []*perf.Event // per-CPU cpu-clock events running the program
	// per-CPU dummy events reporting COMM, MMAP2, FORK and EXIT of every
	// process, with the same sample_id trailer (TID|TIME|CPU) as samples
	trackers []*perf.Event
	cpus     []int
	attr     perf.Attr
	// the programs that end a target at exec and start its forked
	// children (tp_btf/sched_process_exec, _fork), and with Options.Wall
	// the one sampling threads as they leave a CPU (tp_btf/sched_switch)
	links []link.Link
	// offCPUEnds reads the ends of off-CPU intervals (Options.Wall)
	offCPUEnds *ringbuf.Reader
	// allocSeens reads what allocation samples' slots held (Options.Alloc)
	allocSeens *ringbuf.Reader
	// how many of the program's unwind rows are taken, and where each
	// object's are (loadRows)
	rowsUsed  uint32
	pagesUsed uint32
	rowSpans  map[string]rowSpan
	execGen   uint32 // proc_maps.gen of the last SetExecMaps
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
	// OffCPUEnd, when set, is no perf record: a thread sampled as it left a
	// CPU is back on one (Options.Wall).
	OffCPUEnd *payload.OffCPUEnd
	// AllocSeen, when set, is no perf record: what the slot of an
	// allocation sample held at its thread's next refill (Options.Alloc).
	AllocSeen *payload.AllocSeen
}

// Open loads the program and starts sampling on every online CPU. No
// process is a target until AddProcess.
func Open(opts Options) (_ *Sampler, err error) {
	if opts.Frequency <= 0 {
		return nil, fmt.Errorf("sampling frequency %d: must be positive", opts.Frequency)
	}
	if opts.StackSize%8 != 0 || opts.StackSize > MaxStackSize {
		return nil, fmt.Errorf("stack copy of %d bytes: must be a multiple of 8 up to %d", opts.StackSize, MaxStackSize)
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
	spec.Maps["urgent_events"].MaxEntries = uint32(ncpu)
	rows := opts.UnwindRows
	if rows <= 0 {
		rows = DefaultUnwindRows
	}
	if rows > maxObjectRows {
		return nil, fmt.Errorf("%d unwind rows: at most %d", rows, maxObjectRows)
	}
	spec.Maps["unwind_rows"].MaxEntries = uint32(rows)
	// An object's page index has an entry per KiB of code, its rows about
	// 20 a KiB (libruby's): a quarter of the rows' budget leaves room.
	spec.Maps["unwind_pages"].MaxEntries = uint32(max(rows/4, 1))
	if !opts.Wall {
		// The off-CPU program is attached only for Options.Wall, and its
		// verification costs as much as sample_ruby's (about 150 ms, which
		// every attach would pay): without Wall it is loaded as a program
		// that does nothing, never attached.
		spec.Programs["offcpu"].Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	}
	if !opts.Alloc {
		// The same for the allocation program (Options.Alloc).
		spec.Programs["alloc_refill"].Instructions = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	}
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
	// Before any process is a target: a target's exec must never be missed.
	for _, prog := range []*ebpf.Program{s.objs.TargetExec, s.objs.TargetFork} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			return nil, fmt.Errorf("attach BPF program to %s: %w", prog, err)
		}
		s.links = append(s.links, l)
	}
	if opts.Wall {
		if s.offCPUEnds, err = ringbuf.NewReader(s.objs.OffcpuEnds); err != nil {
			return nil, fmt.Errorf("off-CPU ring: %w", err)
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.Offcpu})
		if err != nil {
			return nil, fmt.Errorf("attach BPF program to sched_switch: %w", err)
		}
		s.links = append(s.links, l)
	}
	if opts.Alloc {
		if s.allocSeens, err = ringbuf.NewReader(s.objs.AllocSeens); err != nil {
			return nil, fmt.Errorf("allocation ring: %w", err)
		}
	}
	s.cpus, err = onlineCPUs()
	if err != nil {
		return nil, err
	}
	if opts.RingPages <= 0 {
		opts.RingPages = RingPagesFor(len(s.cpus), sampleRingBudget, sampleRingMin, sampleRingMax)
	}
	sideBandPages := RingPagesFor(len(s.cpus), sideBandRingBudget, sideBandRingMin, sideBandRingMax)
	urgentPages := RingPagesFor(len(s.cpus), urgentRingBudget, urgentRingMin, urgentRingMax)
	page := os.Getpagesize()
	s.attr = outputAttr(opts)
	// Run drains every ring on a timer: the kernel wakes it early only when a
	// ring is half full, or for each urgent sample.
	s.attr.SetWakeupWatermark(uint32(opts.RingPages * page / 2))
	urgent := s.attr
	urgent.SetWakeupEvents(1)
	track := perf.Attr{
		Label: "tracking", Type: perf.SoftwareEvent, Config: uint64(perf.Dummy),
		SampleFormat: perf.SampleFormat{Tid: true, Time: true, CPU: true},
		Options: perf.Options{SampleIDAll: true, Mmap: true, Mmap2: true, MmapData: true, Comm: true,
			CommExec: true, Task: true},
	}
	track.SetWakeupWatermark(uint32(sideBandPages * page / 2))
	clock := perf.Attr{Type: perf.SoftwareEvent, Config: uint64(perf.CPUClock), Options: perf.Options{Disabled: true}}
	clock.SetSampleFreq(uint64(opts.Frequency))
	// Each CPU's rings: the program's output, its urgent output, and the
	// tracking events.
	rings := []struct {
		attr   *perf.Attr
		pages  int
		what   string
		output *ebpf.Map // the program's map of them by CPU; nil: none
		events *[]*perf.Event
	}{
		{&s.attr, opts.RingPages, "bpf-output", s.objs.Events, &s.outputs},
		{&urgent, urgentPages, "urgent bpf-output", s.objs.UrgentEvents, &s.urgent},
		// Every process on the machine writes here: process starts and
		// library loads come in bursts, and a lost MMAP2 of a target leaves
		// its native frames unnamed. 64 KiB lost records while a Ruby
		// started; 1 MiB lost none.
		{&track, sideBandPages, "tracking", nil, &s.trackers},
	}
	for _, cpu := range s.cpus {
		for _, r := range rings {
			ev, err := openRing(r.attr, cpu, r.pages, r.what)
			if err != nil {
				return nil, err
			}
			*r.events = append(*r.events, ev)
			if r.output != nil {
				if err := setOutput(r.output, r.what, cpu, ev); err != nil {
					return nil, err
				}
			}
		}
		if opts.NoCPU {
			continue
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

// mapRing maps ev's ring of pages. The rings are locked memory: past the
// kernel's allowance (perf_event_mlock_kb per CPU) they count against
// RLIMIT_MEMLOCK, unless the process has CAP_IPC_LOCK; a refusal says so.
// openRing opens the event attr on cpu and maps its ring of pages; what
// names the event in errors. An event it cannot map it closes.
func openRing(attr *perf.Attr, cpu, pages int, what string) (*perf.Event, error) {
	ev, err := perf.Open(attr, perf.AllThreads, cpu, nil)
	if err != nil {
		return nil, fmt.Errorf("open %s event on CPU %d: %w", what, cpu, err)
	}
	if err := mapRing(ev, pages); err != nil {
		ev.Close()
		return nil, fmt.Errorf("map %s ring of CPU %d: %w", what, cpu, err)
	}
	return ev, nil
}

// setOutput makes ev, the what event of cpu, where the program's writes
// to m go for cpu.
func setOutput(m *ebpf.Map, what string, cpu int, ev *perf.Event) error {
	fd, err := ev.FD()
	if err != nil {
		return err
	}
	if err := m.Update(uint32(cpu), uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("put the %s event of CPU %d in the program's map: %w", what, cpu, err)
	}
	return nil
}

func mapRing(ev *perf.Event, pages int) error {
	err := ev.MapRingNumPages(pages)
	if errors.Is(err, unix.EPERM) {
		var lim unix.Rlimit
		limit := "unknown"
		if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
			limit = fmt.Sprintf("%d KiB", lim.Cur>>10)
			if lim.Cur == unix.RLIM_INFINITY {
				limit = "unlimited"
			}
		}
		return fmt.Errorf("%w: the sample rings are locked memory, over the locked-memory limit (RLIMIT_MEMLOCK: %s); "+
			"raise it (ulimit -l unlimited; systemd: LimitMEMLOCK=infinity) or grant CAP_IPC_LOCK", err, limit)
	}
	return err
}

// AddProcess makes pid a target.
func (s *Sampler) AddProcess(pid int, cfg ProcessConfig) error {
	if err := s.objs.Procs.Update(uint32(pid), cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("pid %d: add to the BPF target map: %w", pid, err)
	}
	return nil
}

// Reconfigure replaces the configuration of pid if it is still a target
// (not since it exec'd).
func (s *Sampler) Reconfigure(pid int, cfg ProcessConfig) error {
	if err := s.objs.Procs.Update(uint32(pid), cfg, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("pid %d: reconfigure: %w", pid, err)
	}
	return nil
}

// Sampled reports whether pid is a target with configuration gen: not
// since it exec'd, or before it was added.
func (s *Sampler) Sampled(pid int, gen uint32) bool {
	var c ProcessConfig
	return s.objs.Procs.Lookup(uint32(pid), &c) == nil && c.Gen == gen
}

// RemoveProcess stops sampling pid.
func (s *Sampler) RemoveProcess(pid int) {
	s.objs.Procs.Delete(uint32(pid))
	s.objs.ProcUnwind.Delete(uint32(pid))
	s.objs.AllocWindows.Delete(uint32(pid))
}

// Stop stops sampling; records already in the rings can still be read.
func (s *Sampler) Stop() {
	for _, c := range s.clocks {
		c.Disable()
	}
}

// DrainSoon has Run drain the rings now rather than at its next drain,
// for a caller that needs the samples of a moment ago (the objects of
// allocation samples followed while young, recording's --live). It costs
// a wake-up of the reading thread each time.
func (s *Sampler) DrainSoon() {
	if f := s.ringsWait.Load(); f != nil {
		f.SetReadDeadline(time.Unix(1, 0))
		s.soon.Store(true)
	}
}

// drainInterval is how often Run empties the rings whatever their fill: it
// bounds how late a batched record is handled (a target's exit, a new
// process found by -a, the status line, a live recording's samples), and
// an urgent sample whose wake-up Run missed. Every drain costs the
// recorder wake-ups beyond its own (the Go runtime's monitor thread, woken
// by the drain's first system call, polls every 20 µs until the drain is
// done): at 500 ms a recording at 99 Hz woke 41 times a second, at 100 ms
// 98 (perf record: 3); but under load (two busy CPUs besides) a stall of
// up to 500 ms left 13% of the frames of a Ruby running 80 major GCs a
// second unnamed (TestNamesUnderGCPressure; 1% at 100 ms).
const drainInterval = 100 * time.Millisecond

// recordsPerDrain bounds what one drain reads from one ring (a half-full
// 2 MiB ring holds about 100 samples with 8 KiB stack copies).
const recordsPerDrain = 4096

// Run reads every CPU's rings (samples, and COMM/MMAP2/FORK/EXIT of every
// process) until ctx ends, then stops sampling and drains the rings, handing
// each record to fn. fn is never called concurrently.
//
// The calling goroutine waits on all rings at once and drains them all when
// the kernel wakes it (an urgent sample, a half-full ring) or every
// drainInterval: a wake-up per sample would take a CPU from the target a
// thousand times a second per CPU at 999 Hz. It waits and drains itself:
// a goroutine that waited and handed each wake-up on to another woke a
// second thread of the runtime for each. Each drain reads the side-band
// rings first, so a process's COMM and MMAP2 come before its samples of
// the same drain, and urgent samples before batched ones.
func (s *Sampler) Run(ctx context.Context, fn func(Record) error) error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	// The rings' epoll set is itself waited on by the Go runtime's poller
	// (an epoll descriptor is readable while it has events): no thread sits
	// in a blocking system call. Each return from one woke the runtime's
	// monitor thread, which then polled every 20 µs for a while: 300
	// wake-ups a second at 999 Hz, against 30 for the rings themselves.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return fmt.Errorf("epoll: %w", err)
	}
	epf := os.NewFile(uintptr(ep), "rings")
	defer epf.Close()
	s.ringsWait.Store(epf)
	defer s.ringsWait.Store(nil)
	epc, err := epf.SyscallConn()
	if err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	type ring struct {
		cpu      int
		sideBand bool
		ev       *perf.Event
	}
	var rings []ring
	for _, set := range []struct {
		evs      []*perf.Event
		sideBand bool
	}{{s.trackers, true}, {s.urgent, false}, {s.outputs, false}} {
		for i, ev := range set.evs {
			rings = append(rings, ring{s.cpus[i], set.sideBand, ev})
		}
	}
	// Edge-triggered: the set reports a ring once per wake-up the kernel
	// sends (an urgent sample, a half-full ring), not again while it is unread.
	for _, r := range rings {
		fd, err := r.ev.FD()
		if err != nil {
			return err
		}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}); err != nil {
			return fmt.Errorf("epoll ring of CPU %d: %w", r.cpu, err)
		}
	}
	// drain reads what the rings hold, at most limit records from each: a
	// reader slower than the records coming would otherwise never get back
	// to checking ctx.
	drain := func(limit int) error {
		var raw perf.RawRecord
		if err := s.drainOffCPUEnds(fn); err != nil {
			return err
		}
		if err := s.drainAllocSeens(fn); err != nil {
			return err
		}
		for _, r := range rings {
			for n := 0; n < limit && r.ev.HasRecord(); n++ {
				if err := r.ev.ReadRawRecord(context.Background(), &raw); err != nil {
					return fmt.Errorf("read ring of CPU %d: %w", r.cpu, err)
				}
				if err := fn(Record{CPU: r.cpu, SideBand: r.sideBand, Header: raw.Header, Data: raw.Data}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// The end of ctx cuts a wait short: its deadline passes at once.
	stopCutting := context.AfterFunc(ctx, func() { epf.SetReadDeadline(time.Unix(1, 0)) })
	defer stopCutting()
	events := make([]unix.EpollEvent, len(rings))
	// Drains keep their schedule: a wake-up before the deadline (an urgent
	// sample) leaves it as it is. Moving it each time woke another of the
	// runtime's threads to re-arm its poller, a wake-up more per urgent one.
	var deadline time.Time
	for {
		// Set before ctx is looked at: an end of ctx after the look sets
		// the deadline past this one.
		if now := time.Now(); !now.Before(deadline) {
			deadline = now.Add(drainInterval)
			epf.SetReadDeadline(deadline)
		}
		if ctx.Err() == nil {
			if err := waitRings(epc, events); err != nil {
				return err
			}
			if s.soon.Swap(false) {
				epf.SetReadDeadline(deadline) // DrainSoon's wake-up is spent
			}
		}
		if ctx.Err() != nil {
			// Stop sampling, then read what is left: a finite amount.
			s.Stop()
			return drain(math.MaxInt)
		}
		if err := drain(recordsPerDrain); err != nil {
			return err
		}
	}
}

// waitRings waits until the kernel wakes a ring of the epoll set epc, or
// its read deadline passes.
func waitRings(epc syscall.RawConn, events []unix.EpollEvent) error {
	// The poller's own poll of the set consumes the rings' ready state (a
	// perf event's poll resets it), so the set itself may list nothing once
	// the poller has woken us: being woken is the news. The poll below only
	// empties the set's ready list.
	var werr error
	waited := false
	err := epc.Read(func(fd uintptr) bool {
		n, err := pollNow(fd, events)
		if err != nil && err != unix.EINTR && err != unix.EAGAIN {
			werr = err
			return true
		}
		if n > 0 || waited {
			return true
		}
		waited = true
		return false
	})
	if err == nil {
		err = werr
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("epoll wait: %w", err)
	}
	return nil
}

// pollNow lists the epoll set epfd's ready descriptors without waiting. It
// is a raw system call, which never blocks here: through the runtime's
// Syscall it would wake the runtime's monitor thread at every drain, to
// poll every 20 µs while the drain runs.
func pollNow(epfd uintptr, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// drainOffCPUEnds hands fn the ends of off-CPU intervals the ring holds,
// without waiting for more.
func (s *Sampler) drainOffCPUEnds(fn func(Record) error) error {
	return drainRing(s.offCPUEnds, "off-CPU ring", func(e *payload.OffCPUEnd) Record { return Record{OffCPUEnd: e} }, fn)
}

// drainAllocSeens hands fn what the program read of allocation samples'
// slots, without waiting for more.
func (s *Sampler) drainAllocSeens(fn func(Record) error) error {
	return drainRing(s.allocSeens, "allocation ring", func(e *payload.AllocSeen) Record { return Record{AllocSeen: e} }, fn)
}

// drainRing hands fn each T the ring r holds (nil: none), as a Record,
// without waiting for more. A record too short for a T is skipped.
func drainRing[T any](r *ringbuf.Reader, what string, record func(*T) Record, fn func(Record) error) error {
	if r == nil {
		return nil
	}
	r.SetDeadline(time.Unix(1, 0))
	var rec ringbuf.Record
	for {
		err := r.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrFlushed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		e := new(T)
		if len(rec.RawSample) < int(unsafe.Sizeof(*e)) {
			continue
		}
		if _, err := binary.Decode(rec.RawSample, binary.LittleEndian, e); err != nil {
			continue
		}
		if err := fn(record(e)); err != nil {
			return err
		}
	}
}

// MarkNamed tells the program that user space has named these frames of
// pid's image gen (iseq, pc) for the samples of their spans: samples whose
// top frames are all named can wait in the batched rings.
func (s *Sampler) MarkNamed(pid, gen uint32, frames []payload.NamedFrame) error {
	keys := make([]rubyFrameKey, 0, len(frames))
	values := make([]rubyFrameSpan, 0, len(frames))
	for _, f := range frames {
		if f.Iseq != 0 && !f.CFrame {
			keys = append(keys, rubyFrameKey{Pid: pid, Gen: gen, Iseq: f.Iseq, Pc: f.PC})
			values = append(values, rubyFrameSpan{Epoch: f.Span.Epoch, From: f.Span.From, To: f.Span.To, Cme: f.CME})
		}
	}
	if len(keys) == 0 {
		return nil
	}
	// One system call for a new deep stack, where the kernel has batches.
	if _, err := s.objs.KnownFrames.BatchUpdate(keys, values, nil); err == nil {
		return nil
	}
	for i, k := range keys {
		if err := s.objs.KnownFrames.Update(k, values[i], ebpf.UpdateAny); err != nil {
			return fmt.Errorf("pid %d: mark frames named: %w", pid, err)
		}
	}
	return nil
}

// Counts are the program's own counters.
type Counts struct {
	Samples        uint64 // samples of target processes
	OutputErrors   uint64 // records the kernel would not take (ring full)
	Truncated      uint64 // stacks deeper than payload.MaxFrames
	Urgent         uint64 // samples sent to the urgent rings
	Execs          uint64 // targets that exec'd, and so stopped being targets
	Forks          uint64 // children of targets that became targets (ProcessConfig.FollowForks)
	OffCPU         uint64 // samples taken as a thread left a CPU (Options.Wall)
	OffCPUEndsLost uint64 // ends of off-CPU intervals the ring could not take
	Refills        uint64 // allocation-cache refills of targets seen (Options.Alloc)
	AllocSamples   uint64 // allocation samples taken at them
	AllocSeensLost uint64 // what their slots held, not passed on (ring full)
}

// Counts sums the program's per-CPU counters.
func (s *Sampler) Counts() (Counts, error) {
	var c Counts
	for i, dst := range []*uint64{&c.Samples, &c.OutputErrors, &c.Truncated, &c.Urgent, &c.Execs, &c.Forks,
		&c.OffCPU, &c.OffCPUEndsLost, &c.Refills, &c.AllocSamples, &c.AllocSeensLost} {
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
	for _, l := range s.links {
		l.Close()
	}
	if s.allocSeens != nil {
		s.allocSeens.Close()
	}
	if s.offCPUEnds != nil {
		s.offCPUEnds.Close()
	}
	for _, o := range append(append(s.outputs, s.urgent...), s.trackers...) {
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
