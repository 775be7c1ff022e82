package bpf

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// DefaultAllocEvery is how many objects the refills a thread is seen to
// run hand out between two allocation samples: 1, every refill seen is a
// sample (a heap page's free slots, hundreds of objects). The refills seen
// are bounded by the recorder's windows, and each one seen costs a trap:
// its sample adds the stacks' walk, not another trap.
const DefaultAllocEvery = 1

// SampleAllocations makes the program sample the process's threads each
// time the objects of the allocation-cache refills they ran add up to
// every (0: allocations are not sampled). The refills must be attached
// (AttachRefills) for any to be seen.
func (cfg *ProcessConfig) SampleAllocations(every uint64) { cfg.AllocEvery = every }

// Refill is one uprobe site of AttachRefills: the file offset of an
// instruction that zeroes a heap page's free_slots, the register that
// holds the page there (x86_64 numbering, 0 rax .. 15 r15), where a page
// keeps its 16-bit free_slots and slot_size, and its freelist where the
// site still holds the head of the page's free list (-1: it does not):
// the slot the allocation that ran the refill takes, which the sample
// carries (payload.Payload.AllocSlot) and a later refill of its thread
// reads (payload.AllocSeen).
type Refill struct {
	FileOffset          uint64
	PageRegister        int
	FreeSlots, SlotSize int64
	FreeList            int64
}

// cookie packs what the program reads at a refill (REFILL_* in ruby.bpf.c).
func (r Refill) cookie() (uint64, error) {
	if r.PageRegister < 0 || r.PageRegister > 15 || r.PageRegister == 4 {
		return 0, fmt.Errorf("register %d cannot hold a heap page", r.PageRegister)
	}
	if r.FreeSlots < 0 || r.FreeSlots > 0xffff || r.SlotSize < 0 || r.SlotSize > 0xffff || r.FreeList >= 0xffff {
		return 0, fmt.Errorf("heap_page offsets %d, %d and %d: beyond the 16 bits the program takes", r.FreeSlots, r.SlotSize, r.FreeList)
	}
	c := uint64(r.PageRegister) | uint64(r.FreeSlots)<<8 | uint64(r.SlotSize)<<24
	if r.FreeList >= 0 {
		c |= uint64(r.FreeList+1) << 40
	}
	return c, nil
}

// Refills are the uprobes of one process's refill sites, armed only
// while a window is open (Arm, Disarm): a uprobe costs a trap each time it
// is hit, 1 to 2 µs on a bare machine and about 16 µs under nested
// virtualization, and a Ruby allocating 5 million objects a second refills
// its cache tens of thousands of times a second.
type Refills struct {
	mu      sync.Mutex
	closing sync.WaitGroup // links being closed (Disarm)
	closed  bool
	pid     int
	path    string
	ex      *link.Executable
	prog    *ebpf.Program
	sites   []Refill
	links   []link.Link
}

// Arm puts the uprobes on the sites.
func (r *Refills) Arm() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.links) > 0 || r.closed {
		return nil
	}
	addrs, cookies := make([]uint64, len(r.sites)), make([]uint64, len(r.sites))
	for i, site := range r.sites {
		addrs[i] = site.FileOffset
		cookies[i], _ = site.cookie() // checked by Sampler.Refills
	}
	l, err := r.ex.UprobeMulti(nil, r.prog, &link.UprobeMultiOptions{Addresses: addrs, Cookies: cookies, PID: uint32(r.pid)})
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("this kernel cannot attach uprobe_multi links (Linux 6.6 or later): %w", err)
	}
	if err != nil {
		return fmt.Errorf("pid %d: uprobes at %s+%#x: %w", r.pid, r.path, addrs, err)
	}
	r.links = append(r.links, l)
	return nil
}

// Disarm takes the uprobes off, in the background: closing a link takes
// its breakpoints out first thing, then waits for a grace period (tens of
// milliseconds measured here), which the next window need not wait for.
// The program counts no refill once the process's window is 0
// (ProcessConfig.SetAllocWindow): set it first for a window to end at
// once.
func (r *Refills) Disarm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	links := r.links
	r.links = nil
	if len(links) == 0 {
		return
	}
	r.closing.Add(1)
	go func() {
		defer r.closing.Done()
		for _, l := range links {
			l.Close()
		}
	}()
}

// Close takes the uprobes off for good, and returns once they are: Arm
// does nothing after it.
func (r *Refills) Close() error {
	r.mu.Lock()
	r.closed = true
	var errs []error
	for _, l := range r.links {
		errs = append(errs, l.Close())
	}
	r.links = nil
	r.mu.Unlock()
	r.closing.Wait()
	return errors.Join(errs...)
}

// Refills returns the uprobes that sample allocations at the refill sites
// of the ELF file at path (as the recorder can open it: through the
// process's root), for process pid only, not armed yet. The sites come
// from the binary's code (rubybuild's RefillSites): a uprobe elsewhere
// would read a register that holds no page. Options.Alloc must have
// loaded the program.
func (s *Sampler) Refills(pid int, path string, sites []Refill) (*Refills, error) {
	if len(sites) == 0 {
		return nil, errors.New("no allocation-cache refill to attach to")
	}
	for _, site := range sites {
		if _, err := site.cookie(); err != nil {
			return nil, fmt.Errorf("pid %d: %s+%#x: %w", pid, path, site.FileOffset, err)
		}
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", pid, path, err)
	}
	return &Refills{pid: pid, path: path, ex: ex, prog: s.objs.AllocRefill, sites: sites}, nil
}

// AllocWindow is when the refills of one process were seen in its latest
// window of armed uprobes (ProcessConfig.SetAllocWindow): the first and
// the last (CLOCK_MONOTONIC), and how many.
type AllocWindow struct {
	Window      uint32
	Refills     uint32
	First, Last time.Duration
	Objects     uint64 // the refills' objects, as seen
	// Busy is how long the program ran for the refills, their samples'
	// walks included: the part of their stall that grows with the stack.
	Busy time.Duration
}

// CountAllocations gives the program the allocation counters that make
// the weights exact (alloc_pools in ruby.bpf.c): the one counter of the
// process at address counter, or (counter 0) the counter at poolCounter in
// the pool a heap page points to at pagePool. Negative offsets: none.
func (cfg *ProcessConfig) CountAllocations(counter uint64, pagePool, poolCounter int64) {
	cfg.AllocCounter, cfg.AllocPagePool, cfg.AllocPoolCounter = counter, 0, 0
	if counter == 0 && pagePool >= 0 && pagePool < 1<<16 && poolCounter >= 0 && poolCounter < 1<<16 {
		cfg.AllocPagePool, cfg.AllocPoolCounter = uint32(pagePool)+1, uint32(poolCounter)+1
	}
}

// SetAllocWindow numbers the window the uprobes are armed in next; 0
// ends the window: the program counts no refill until the next.
func (cfg *ProcessConfig) SetAllocWindow(n uint32) { cfg.AllocWindow = n }

// AllocWindow returns what the program saw of pid's latest window.
func (s *Sampler) AllocWindow(pid int) (AllocWindow, bool) {
	var w rubyAllocWindow
	if err := s.objs.AllocWindows.Lookup(uint32(pid), &w); err != nil {
		return AllocWindow{}, false
	}
	return AllocWindow{Window: w.Window, Refills: w.Refills, First: time.Duration(w.First), Last: time.Duration(w.Last),
		Objects: w.Objects, Busy: time.Duration(w.Busy)}, true
}
