package bpf

import "testing"

// TestRefillCookie: a refill site's cookie packs what the program reads
// there as ruby.bpf.c's REFILL_* take it apart, the freelist one more than
// its offset (0: the site does not hold the free list's head), and refuses
// what does not fit.
func TestRefillCookie(t *testing.T) {
	for _, tc := range []struct {
		r    Refill
		want uint64
		ok   bool
	}{
		{Refill{PageRegister: 0, FreeSlots: 4, SlotSize: 6, FreeList: 40}, 4<<8 | 6<<24 | 41<<40, true},
		{Refill{PageRegister: 13, FreeSlots: 4, SlotSize: 6, FreeList: -1}, 13 | 4<<8 | 6<<24, true},
		{Refill{PageRegister: 6, FreeSlots: 0xfffe, SlotSize: 0xffff, FreeList: 0xfffe}, 6 | 0xfffe<<8 | 0xffff<<24 | 0xffff<<40, true},
		{Refill{PageRegister: 4, FreeSlots: 4, SlotSize: 6, FreeList: 40}, 0, false}, // rsp
		{Refill{PageRegister: 16, FreeSlots: 4, SlotSize: 6, FreeList: 40}, 0, false},
		{Refill{PageRegister: 1, FreeSlots: 4, SlotSize: 6, FreeList: 0xffff}, 0, false}, // one more would not fit
		{Refill{PageRegister: 1, FreeSlots: -1, SlotSize: 6, FreeList: 40}, 0, false},
	} {
		got, err := tc.r.cookie()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%+v: cookie %#x, %v; want %#x (ok %v)", tc.r, got, err, tc.want, tc.ok)
		}
		reg, free, size, list := got&0xff, got>>8&0xffff, got>>24&0xffff, got>>40&0xffff
		if tc.ok && (reg != uint64(tc.r.PageRegister) || free != uint64(tc.r.FreeSlots) || size != uint64(tc.r.SlotSize) ||
			list != uint64(tc.r.FreeList+1)) {
			t.Errorf("%+v: unpacked %d %d %d %d", tc.r, reg, free, size, list)
		}
	}
}
