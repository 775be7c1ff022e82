package perfmap

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestFreeBase(t *testing.T) {
	for _, c := range []struct {
		name     string
		existing []Entry
		size     uint64
		want     uint64
		err      bool
	}{
		{"empty", nil, 0x100, Floor, false},
		{"only JIT code", jitEntries, 0x100, Floor, false},
		{"above an earlier run", []Entry{{Floor, 0x1234, "run1"}}, 0x100, Floor + 0x2000, false},
		{"above the highest, aligned", []Entry{{Floor + 0x5000, 0x1000, "b"}, {Floor, 0x10, "a"}}, 0x10, Floor + 0x6000, false},
		{"straddling the floor", []Entry{{Floor - 0x10, 0x20, "x"}}, 0x10, Floor + Align, false},
		{"size 0 counts as a byte", []Entry{{Floor, 0, "zero"}}, 0x10, Floor + Align, false},
		{"kernel-half entries do not matter", []Entry{{0xffffffff81000000, 0x1000, "k"}}, 0x10, Floor, false},
		{"gap when the top is full", []Entry{{Floor + 0x10000, Ceiling - Floor - 0x10000, "top"}}, 0x10000, Floor, false},
		{"gap between", []Entry{{Floor, 0x1000, "a"}, {Floor + 0x3000, Ceiling - Floor - 0x3000, "b"}}, 0x2000, Floor + 0x1000, false},
		{"gap too small", []Entry{{Floor, 0x1000, "a"}, {Floor + 0x2800, Ceiling - Floor - 0x2800, "b"}}, 0x2000, 0, true},
		{"overflowing entry", []Entry{{^uint64(0) - 4, 0x100, "wrap"}}, 0x10, Floor, false},
		{"too big", nil, Ceiling - Floor + 1, 0, true},
		{"whole window", nil, Ceiling - Floor, Floor, false},
		{"zero", nil, 0, 0, true},
	} {
		got, err := FreeBase(c.existing, c.size)
		if c.err {
			if err == nil {
				t.Errorf("%s: got %#x, want an error", c.name, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %#x %v, want %#x", c.name, got, err, c.want)
		}
	}
	if _, err := FreeBase([]Entry{{Floor, Ceiling - Floor, "all"}}, 1); !errors.Is(err, ErrNoRoom) {
		t.Errorf("full window: %v, want ErrNoRoom", err)
	}
}

// TestFreeBaseDisjoint checks the property on random maps.
func TestFreeBaseDisjoint(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gaps := 0
	for i := range 2000 {
		var existing []Entry
		for range r.IntN(20) {
			start := Floor + r.Uint64N(1<<20)
			if r.IntN(4) == 0 {
				start = Ceiling - r.Uint64N(1<<20)
			}
			existing = append(existing, Entry{start, r.Uint64N(1 << 16), "x"})
		}
		size := 1 + r.Uint64N(1<<18)
		base, err := FreeBase(existing, size)
		if err != nil {
			continue // a full top with no gap: rare, and an error is right
		}
		if base < Floor || base > Ceiling-size || base%Align != 0 {
			t.Fatalf("case %d: base %#x size %#x outside the window or unaligned", i, base, size)
		}
		below := false
		for _, e := range existing {
			end := max(e.End(), e.Start+1)
			if e.Start < base+size && base < end {
				t.Fatalf("case %d: [%#x,+%#x) overlaps %v", i, base, size, e)
			}
			below = below || e.Start >= base+size && e.Start < Ceiling
		}
		if below {
			gaps++
		}
	}
	if gaps < 100 {
		t.Errorf("only %d cases found a gap below an existing entry", gaps)
	}
}
