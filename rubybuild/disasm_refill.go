package rubybuild

import (
	"debug/elf"
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Where an allocation profile samples: the refill of a Ractor's allocation
// cache. CRuby hands out objects from a per-Ractor free list; when it runs
// dry, the allocator takes the next heap page with free slots and moves the
// page's whole free list to the cache (ractor_set_cache in 3.1,
// ractor_cache_set_page from 3.2), zeroing the page's count of free slots:
//
//	size_pool_cache->using_page = page;
//	size_pool_cache->freelist = page->freelist;
//	page->free_slots = 0;
//	page->freelist = NULL;
//
// That function is static and inlined into the allocator's slow path, so a
// stripped build has no symbol for it. Its code is found by what it does:
// a 16-bit store of zero to page->free_slots, near a load of page->freelist
// and a store of zero to it, all through the same register, at the offsets
// of the Layout's struct heap_page. Before the store runs, page->free_slots
// is the number of objects the cache will hand out of that page: the weight
// of a sample taken there, which makes sampling at refills unbiased (each
// refill stands for the allocations it serves). A build with DWARF checks
// the sites found this way against the inlined copies DWARF lists.

// RefillSite is an instruction of a Ruby build that zeroes a heap page's
// free-slot count as the page's free list goes to an allocation cache.
type RefillSite struct {
	Addr       uint64 // the instruction's virtual address in the ELF file
	FileOffset uint64 // ... and its offset in the file (where a uprobe goes)
	// Page is the general register that holds the page there, numbered as
	// x86_64 encodes it (0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp, 6 rsi,
	// 7 rdi, 8-15 r8-r15).
	Page int
	// HeadInPage: page->freelist is cleared after the site, so there it
	// still holds the head of the page's free list, the slot the
	// allocation that ran the refill takes.
	HeadInPage bool
}

// Refill is how allocations are sampled in a build: the sites, and the
// members of struct heap_page read there.
type Refill struct {
	Sites     []RefillSite
	FreeSlots Member // heap_page free_slots: objects the refill hands out
	SlotSize  Member // heap_page slot_size: bytes of each
	FreeList  Member // heap_page freelist: the head of the page's free slots
	How       string // how the sites were found
}

// Bounds on the search.
const (
	maxRefillText  = 256 << 20 // bytes of executable code swept
	maxRefillSites = 64        // sites kept: a build inlines the refill a few times
	refillWindow   = 24        // instructions either side of the store searched for the rest
)

// ErrNoRefill says a build's allocation cache refill could not be located.
var ErrNoRefill = errors.New("the allocation cache refill was not found")

// RefillSites locates the allocation cache refills of b's code, with the
// heap_page members of l, once for each layout; once for each build, where
// b shares a Cache and l is the layout b handed out (the sweep takes a few
// hundred milliseconds: every process of one Ruby, and every attempt to
// attach to one still booting, share it).
func (b *Binary) RefillSites(l *Layout) (*Refill, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refillFor != l || b.refill == nil && b.refillErr == nil {
		shared := b.shared != nil && l == b.layout
		if shared {
			if r := b.cache.refill(b.shared); r != nil {
				b.refill, b.refillErr, b.refillFor = r, nil, l
				return r, nil
			}
		}
		b.refill, b.refillErr = b.findRefill(l)
		b.refillFor = l
		if shared && b.refillErr == nil {
			b.cache.putRefill(b.shared, b.refill)
		}
	}
	return b.refill, b.refillErr
}

func (b *Binary) findRefill(l *Layout) (*Refill, error) {
	if b.elf.f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%w: locating it supports x86_64 only", ErrNoRefill)
	}
	page := l.Structs["heap_page"]
	r := &Refill{FreeSlots: page.Members["free_slots"], SlotSize: page.Members["slot_size"]}
	freelist, ok := page.Members["freelist"]
	r.FreeList = freelist
	switch {
	case len(page.Members) == 0:
		return nil, fmt.Errorf("%w: layout %s has no struct heap_page", ErrNoRefill, l.Source)
	case !ok || freelist.Size != 8 || r.FreeSlots.Size != 2 || r.FreeSlots.BitSize != 0:
		return nil, fmt.Errorf("%w: layout %s: heap_page has no 8-byte freelist and 2-byte free_slots", ErrNoRefill, l.Source)
	case r.SlotSize.Size != 2 || r.SlotSize.BitSize != 0:
		return nil, fmt.Errorf("%w: layout %s: heap_page has no 2-byte slot_size", ErrNoRefill, l.Source)
	}
	var sites []RefillSite
	for _, s := range b.elf.f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
			continue
		}
		if s.Size > maxRefillText {
			return nil, fmt.Errorf("%w: section %s is %d bytes, more than the %d searched", ErrNoRefill, s.Name, s.Size, maxRefillText)
		}
		code, err := b.elf.sectionData(s)
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
		found := findRefillsNear(code, s.Addr, r.FreeSlots.Offset, freelist.Offset)
		for i := range found {
			// In a section of code, which a loadable segment holds.
			found[i].FileOffset = found[i].Addr - s.Addr + s.Offset
		}
		if len(sites)+len(found) > maxRefillSites {
			return nil, fmt.Errorf("%w: more than %d places zero heap_page free_slots; none is trusted", ErrNoRefill, maxRefillSites)
		}
		sites = append(sites, found...)
	}
	if len(sites) == 0 {
		return nil, fmt.Errorf("%w: no code stores zero to heap_page free_slots (+%d) beside freelist (+%d)",
			ErrNoRefill, r.FreeSlots.Offset, freelist.Offset)
	}
	r.Sites = sites
	r.How = fmt.Sprintf("disassembly: %d stores of zero to heap_page free_slots (+%d) beside a load and a store of zero of freelist (+%d), layout %s",
		len(sites), r.FreeSlots.Offset, freelist.Offset, l.Source)
	return r, nil
}

// Around a candidate, findRefillsNear decodes refillBefore bytes before it
// and refillAfter after: more than refillWindow instructions of the
// longest common encodings each way, so that the decoding has found the
// instructions' boundaries well before the candidate (x86 code
// resynchronises within a few instructions) and sees the whole window.
const (
	refillBefore = 512
	refillAfter  = 256
)

// findRefillsNear is findRefills, decoding only around the bytes that can
// start a 16-bit store (the operand-size prefix 0x66, then at most one REX
// prefix, then MOV's opcode 0x89 or 0xc7): a sweep of a whole libruby
// decodes some million instructions, a few hundred milliseconds that the
// start of record --alloc -- CMD waited for. Only sites at such a byte
// are kept: elsewhere the window may have been cut.
func findRefillsNear(code []byte, base uint64, freeSlots, freelist int64) []RefillSite {
	var sites []RefillSite
	cands := map[int]bool{}
	var spans [][2]int
	for i := 0; i+2 < len(code); i++ {
		if code[i] != 0x66 {
			continue
		}
		op := code[i+1]
		if op&0xf0 == 0x40 { // REX
			op = code[i+2]
		}
		if op != 0x89 && op != 0xc7 {
			continue
		}
		cands[i] = true
		lo, hi := max(0, i-refillBefore), min(len(code), i+refillAfter)
		if n := len(spans); n > 0 && lo <= spans[n-1][1] {
			spans[n-1][1] = hi
		} else {
			spans = append(spans, [2]int{lo, hi})
		}
	}
	for _, sp := range spans {
		for _, site := range findRefills(code[sp[0]:sp[1]], base+uint64(sp[0]), freeSlots, freelist) {
			if cands[int(site.Addr-base)] && len(sites) <= maxRefillSites {
				sites = append(sites, site)
			}
		}
	}
	return sites
}

// decoded is one instruction of a sweep.
type decoded struct {
	pc   uint64
	inst x86asm.Inst
	zero uint16 // general registers known to hold zero before it (bit per register)
}

// findRefills sweeps code (at virtual address base) in address order and
// returns the refill stores in it: a 16-bit store of zero to [R+freeSlots],
// with, among the refillWindow instructions before it, a load of
// [R+freelist] and, within the window either side, a store of zero to
// [R+freelist], R unchanged in between. A byte the decoder does not take is
// skipped (data in the code, padding): the shape is far too specific to
// appear by chance.
func findRefills(code []byte, base uint64, freeSlots, freelist int64) []RefillSite {
	var sites []RefillSite
	ring := make([]decoded, 2*refillWindow+1)
	n := 0 // instructions decoded
	var zero uint16
	check := func() {
		// The candidate is the instruction refillWindow back: the window on
		// both sides of it is decoded.
		if n <= refillWindow {
			return
		}
		ci := n - 1 - refillWindow
		c := ring[ci%len(ring)]
		reg, ok := zeroStore(c, 2, freeSlots)
		if !ok {
			return
		}
		load, clearBefore, clearAfter := false, false, false
		// Back: the load of page->freelist, and maybe the store of NULL.
		for k := 1; k <= refillWindow && ci-k >= 0; k++ {
			d := ring[(ci-k)%len(ring)]
			if r, ok := loadFrom(d.inst, 8, freelist); ok && r == reg {
				load = true
			}
			if r, ok := zeroStore(d, 8, freelist); ok && r == reg {
				clearBefore = true
			}
			if writes(d.inst, reg) {
				break // before this, reg held something else
			}
		}
		// Forward: the store of NULL.
		for k := 1; k <= refillWindow && ci+k < n; k++ {
			d := ring[(ci+k)%len(ring)]
			if r, ok := zeroStore(d, 8, freelist); ok && r == reg {
				clearAfter = true
			}
			if writes(d.inst, reg) || isBranch(d.inst) {
				break
			}
		}
		if load && (clearBefore || clearAfter) && len(sites) < maxRefillSites+1 {
			sites = append(sites, RefillSite{Addr: c.pc, Page: reg, HeadInPage: clearAfter && !clearBefore})
		}
	}
	for pos := 0; pos < len(code); {
		inst, err := x86asm.Decode(code[pos:], 64)
		if err != nil || inst.Len == 0 {
			pos++
			zero = 0
			continue
		}
		ring[n%len(ring)] = decoded{pc: base + uint64(pos), inst: inst, zero: zero}
		zero = zeroAfter(inst, zero)
		n++
		pos += inst.Len
		check()
	}
	for k := 0; k < refillWindow; k++ { // the last candidates
		ring[n%len(ring)] = decoded{}
		n++
		check()
	}
	return sites
}

// zeroStore: d stores zero (an immediate 0, or a register known to be zero
// before it) of size bytes to [R+disp]; it returns R.
func zeroStore(d decoded, size int, disp int64) (int, bool) {
	in := d.inst
	if in.Op != x86asm.MOV || in.MemBytes != size {
		return 0, false
	}
	m, ok := in.Args[0].(x86asm.Mem)
	if !ok || m.Segment != 0 || m.Index != 0 || m.Disp != disp {
		return 0, false
	}
	base := regFamily(m.Base)
	if base < 0 || m.Base == x86asm.RIP {
		return 0, false
	}
	switch src := in.Args[1].(type) {
	case x86asm.Imm:
		if src != 0 {
			return 0, false
		}
	case x86asm.Reg:
		r := regFamily(src)
		if r < 0 || d.zero&(1<<r) == 0 {
			return 0, false
		}
	default:
		return 0, false
	}
	return base, true
}

// loadFrom: in loads size bytes from [R+disp] into a register; it returns R.
func loadFrom(in x86asm.Inst, size int, disp int64) (int, bool) {
	if in.Op != x86asm.MOV || in.MemBytes != size {
		return 0, false
	}
	if _, ok := in.Args[0].(x86asm.Reg); !ok {
		return 0, false
	}
	m, ok := in.Args[1].(x86asm.Mem)
	if !ok || m.Segment != 0 || m.Index != 0 || m.Disp != disp || m.Base == x86asm.RIP {
		return 0, false
	}
	base := regFamily(m.Base)
	return base, base >= 0
}

// writes says whether in may change general register r.
func writes(in x86asm.Inst, r int) bool {
	switch in.Op {
	case x86asm.CALL:
		return true // and clobbers the caller-saved ones
	case x86asm.CMP, x86asm.TEST, x86asm.PUSH, x86asm.JMP, x86asm.NOP:
		return false
	}
	if in.Op == x86asm.XCHG || in.Op == x86asm.XADD || in.Op == x86asm.CMPXCHG {
		for _, a := range in.Args {
			if reg, ok := a.(x86asm.Reg); ok && regFamily(reg) == r {
				return true
			}
		}
	}
	if reg, ok := in.Args[0].(x86asm.Reg); ok && regFamily(reg) == r {
		return true
	}
	return false
}

// isBranch: control may leave the straight line at in.
func isBranch(in x86asm.Inst) bool {
	switch in.Op {
	case x86asm.JMP, x86asm.RET, x86asm.CALL, x86asm.UD2, x86asm.HLT:
		return true
	}
	return in.Op >= x86asm.JA && in.Op <= x86asm.JS && in.Op != x86asm.JMP
}

// zeroAfter returns the registers known to hold zero after in, from those
// known before: xor r,r and mov $0,r make one zero; any other write, or a
// branch target (unknowable here, so any branch or call), forgets.
func zeroAfter(in x86asm.Inst, zero uint16) uint16 {
	if isBranch(in) {
		return 0
	}
	dst, ok := in.Args[0].(x86asm.Reg)
	if !ok {
		return zero
	}
	r := regFamily(dst)
	if r < 0 {
		return zero
	}
	switch {
	case (in.Op == x86asm.XOR || in.Op == x86asm.SUB) && in.Args[1] == in.Args[0] && dst >= x86asm.EAX:
		// xor %eax,%eax (and the 64-bit form) zeroes all of the register.
		return zero | 1<<r
	case in.Op == x86asm.MOV && in.Args[1] == x86asm.Imm(0) && dst >= x86asm.EAX:
		return zero | 1<<r
	}
	if writes(in, r) {
		return zero &^ (1 << r)
	}
	return zero
}
