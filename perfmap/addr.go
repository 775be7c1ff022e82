package perfmap

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// The window FreeBase hands synthetic addresses out of: [Floor, Ceiling).
//
// Floor is far above every user-space address: x86_64 user space ends
// below 2^47 (2^56 with 5-level paging) and arm64's below 2^52, so no real
// mapping, and no range YJIT or ZJIT writes for real code, can reach it.
// Synthetic ranges are never executed: they only need to lie inside an
// executable "//anon" MMAP2 that the tool writes into its perf.data, and
// perf 6.1 symbolises such a non-canonical range from the perf map
// (checked with perf script and perf report, with and without
// callchains). Ceiling, 2^63, is a precaution: perf guesses that
// addresses from 2^63 up are the kernel's when it knows no kernel map
// (machine__kernel_start), although samples marked user-mode symbolised
// correctly above it too.
const (
	Floor   uint64 = 0x7f00_0000_0000_0000
	Ceiling uint64 = 0x8000_0000_0000_0000
)

// Align is the alignment of the bases FreeBase returns: a page, as the
// kernel would align a real mapping.
const Align = 4096

// ErrNoRoom is returned by FreeBase when no free range is big enough.
var ErrNoRoom = errors.New("no free synthetic address range")

// FreeBase returns an Align-aligned base such that [base, base+size) lies
// in [Floor, Ceiling) and is disjoint from every entry in existing: just
// above the highest entry in that window (Floor if there is none), so that
// successive runs stack up, or, if that leaves too little room below
// Ceiling, the lowest gap that fits. An entry of size 0 counts as one byte.
func FreeBase(existing []Entry, size uint64) (uint64, error) {
	var used []span
	for _, e := range existing {
		if s, ok := window(e); ok {
			used = append(used, s)
		}
	}
	return freeBase(used, size)
}

// span is a half-open range of used addresses.
type span struct{ lo, hi uint64 }

// window returns the part of e inside [Floor, Ceiling), if any.
func window(e Entry) (span, bool) {
	lo, hi := e.Start, e.End()
	if e.Size == 0 && lo < ^uint64(0) {
		hi = lo + 1
	}
	lo, hi = max(lo, Floor), min(hi, Ceiling)
	return span{lo, hi}, lo < hi
}

func freeBase(used []span, size uint64) (uint64, error) {
	if size == 0 || size > Ceiling-Floor {
		return 0, fmt.Errorf("free base for %#x bytes: size must be between 1 and %#x", size, Ceiling-Floor)
	}
	top := Floor
	for _, s := range used {
		top = max(top, s.hi)
	}
	if b := alignUp(top); b <= Ceiling-size {
		return b, nil
	}
	slices.SortFunc(used, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	cur := Floor
	for _, s := range used {
		if b := alignUp(cur); b < s.lo && s.lo-b >= size {
			return b, nil
		}
		cur = max(cur, s.hi)
	}
	return 0, fmt.Errorf("free base for %#x bytes: %w between %#x and %#x", size, ErrNoRoom, Floor, Ceiling)
}

// alignUp rounds x (below Ceiling) up to Align.
func alignUp(x uint64) uint64 { return (x + Align - 1) &^ (Align - 1) }
