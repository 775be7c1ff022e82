package rubybuild

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// refillFuncs are the names CRuby gives the function that hands a heap
// page's free list to a Ractor's allocation cache.
var refillFuncs = map[string]bool{"ractor_set_cache": true, "ractor_cache_set_page": true}

// TestRefillSites: on every test Ruby, stripped or not, the refill of the
// allocation cache is found by disassembly; where the build has DWARF, the
// sites are one (or two, where the compiler duplicated its tail) in each
// copy of the refill function DWARF lists (inlined or not), and none
// elsewhere.
func TestRefillSites(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			b, err := OpenBinary(r.VM, OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			l, err := b.Layout()
			if err != nil {
				t.Fatal(err)
			}
			ref, err := b.RefillSites(l)
			if err != nil {
				t.Fatalf("%s (layout %s): %v", r.VM, l.Source, err)
			}
			t.Logf("%s: %d sites %+v; %s", r.Name, len(ref.Sites), ref.Sites, ref.How)
			copies, err := refillCopies(b)
			if errors.Is(err, errNoDWARF) {
				// A stripped twin of a build with DWARF has its code, at the
				// same addresses: the same sites.
				full, ok := testruby.Optional(strings.TrimSuffix(r.Name, "-stripped"))
				if !ok || !full.DWARF || full.Name == r.Name {
					return
				}
				fb, fl := openLayout(t, full.VM)
				want, err := fb.RefillSites(fl)
				if err != nil || !slices.Equal(want.Sites, ref.Sites) {
					t.Errorf("sites %+v, of %s with DWARF %+v (%v)", ref.Sites, full.Name, want, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(copies) == 0 {
				t.Fatalf("DWARF lists no copy of %v", refillFuncs)
			}
			in := make([]int, len(copies))
			for _, s := range ref.Sites {
				found := false
				for i, c := range copies {
					for _, rg := range c {
						if s.Addr >= rg[0] && s.Addr < rg[1] {
							in[i]++
							found = true
						}
					}
				}
				if !found {
					t.Errorf("site %#x is in no copy of the refill function", s.Addr)
				}
			}
			// A compiler may duplicate the store within a copy (4.0.5's
			// gcc reaches it on two paths): each path is a site.
			for i, n := range in {
				if n < 1 || n > 2 {
					t.Errorf("copy %d of the refill function (%#x) holds %d sites, want 1 or 2", i, copies[i], n)
				}
			}
		})
	}
}

// refillCopies returns the address ranges of each copy of the refill
// function in b's DWARF: its inlined instances and its out-of-line ones.
func refillCopies(b *Binary) ([][][2]uint64, error) {
	for _, e := range []*elfFile{b.elf, b.debug} {
		if e == nil {
			continue
		}
		if _, _, err := e.loadDWARF(); errors.Is(err, errNoDWARF) {
			continue
		}
		// All of its DWARF, with the ranges the layout reader does not load.
		d, err := e.f.DWARF()
		if err != nil {
			return nil, err
		}
		return dwarfCopies(d, refillFuncs)
	}
	return nil, errNoDWARF
}

// dwarfCopies lists the code ranges of every concrete copy of the named
// functions: DW_TAG_inlined_subroutine and DW_TAG_subprogram entries whose
// abstract origin (or own name) is one of them.
func dwarfCopies(d *dwarf.Data, names map[string]bool) ([][][2]uint64, error) {
	origins := map[dwarf.Offset]bool{}
	type concrete struct {
		origin dwarf.Offset
		name   string
		ranges [][2]uint64
	}
	var all []concrete
	rd := d.Reader()
	for {
		e, err := rd.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagSubprogram && e.Tag != dwarf.TagInlinedSubroutine {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if names[name] {
			origins[e.Offset] = true
		}
		ranges, err := d.Ranges(e)
		if err != nil || len(ranges) == 0 {
			continue
		}
		origin, _ := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		all = append(all, concrete{origin: origin, name: name, ranges: ranges})
	}
	var out [][][2]uint64
	for _, c := range all {
		if names[c.name] || origins[c.origin] {
			out = append(out, c.ranges)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0][0] < out[j][0][0] })
	return out, nil
}

// refillBytes is the refill of Debian's 3.1.2 (libruby-3.1.so.3.1.2 at
// 0xda2c8): mov 0x28(%rax),%rbp; mov 0x18(%rax),%rcx; movq %rax,%xmm1;
// xor %edx,%edx; movq %rbp,%xmm0; mov %rcx,0x38(%r12); punpcklqdq
// %xmm1,%xmm0; movups %xmm0,0x280(%rbx); mov %dx,0x4(%rax); movq
// $0x0,0x28(%rax).
var refillBytes = []byte{
	0x48, 0x8b, 0x68, 0x28, 0x48, 0x8b, 0x48, 0x18, 0x66, 0x48, 0x0f, 0x6e, 0xc8, 0x31, 0xd2,
	0x66, 0x48, 0x0f, 0x6e, 0xc5, 0x49, 0x89, 0x4c, 0x24, 0x38, 0x66, 0x0f, 0x6c, 0xc1,
	0x0f, 0x11, 0x83, 0x80, 0x02, 0x00, 0x00, 0x66, 0x89, 0x50, 0x04,
	0x48, 0xc7, 0x40, 0x28, 0x00, 0x00, 0x00, 0x00,
}

// TestFindRefills: the refill's shape is found, at the store of zero to
// free_slots, with its register; moved registers, another offset, or the
// store of NULL taken away, it is not.
func TestFindRefills(t *testing.T) {
	got := findRefills(refillBytes, 0xda2c8, 4, 40)
	if want := []RefillSite{{Addr: 0xda2ec, Page: 0, HeadInPage: true}}; !slices.Equal(got, want) {
		t.Fatalf("sites %+v, want %+v", got, want)
	}
	// The store of NULL before the store of zero: the site is found, but
	// the page no longer holds the head of its free list there.
	n := len(refillBytes)
	early := slices.Concat(refillBytes[:n-12], refillBytes[n-8:], refillBytes[n-12:n-8])
	if want := []RefillSite{{Addr: 0xda2f4, Page: 0}}; !slices.Equal(findRefills(early, 0xda2c8, 4, 40), want) {
		t.Errorf("with the store of NULL first: sites %+v, want %+v", findRefills(early, 0xda2c8, 4, 40), want)
	}
	if got := findRefills(refillBytes, 0xda2c8, 6, 40); len(got) != 0 {
		t.Errorf("free_slots at +6: sites %+v, want none", got)
	}
	if got := findRefills(refillBytes[:len(refillBytes)-8], 0xda2c8, 4, 40); len(got) != 0 {
		t.Errorf("without the store of NULL: sites %+v, want none", got)
	}
	// The page's register written between the load and the store.
	clobbered := slices.Concat(refillBytes[:4], []byte{0x48, 0x31, 0xc0}, refillBytes[4:]) // xor %rax,%rax
	if got := findRefills(clobbered, 0xda2c8, 4, 40); len(got) != 0 {
		t.Errorf("with %%rax written after the load: sites %+v, want none", got)
	}
}

// FuzzFindRefills: any bytes are swept without a panic, whole or around
// the candidates, and every site found is in the code, at most
// maxRefillSites+1 of them.
func FuzzFindRefills(f *testing.F) {
	f.Add(refillBytes, int64(4), int64(40))
	f.Add(slices.Concat(refillBytes, refillBytes), int64(4), int64(40))
	f.Fuzz(func(t *testing.T, code []byte, freeSlots, freelist int64) {
		const base = 0x1000
		sites := findRefills(code, base, freeSlots, freelist)
		if len(sites) > maxRefillSites+1 {
			t.Fatalf("%d sites", len(sites))
		}
		if near := findRefillsNear(code, base, freeSlots, freelist); len(near) > maxRefillSites+1 {
			t.Fatalf("%d sites around candidates", len(near))
		}
		for _, s := range sites {
			if s.Addr < base || s.Addr >= base+uint64(len(code)) || s.Page < 0 || s.Page > 15 {
				t.Fatalf("site %+v outside the code [%#x, %#x) or no register", s, base, base+len(code))
			}
		}
	})
}

// TestRefillsNearEqualSweep: decoding only around the bytes that can start
// a 16-bit store finds exactly the sites a sweep of all the code finds, on
// every test Ruby's executable sections.
func TestRefillsNearEqualSweep(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			b, l := openLayout(t, r.VM)
			page := l.Structs["heap_page"]
			freeSlots, freelist := page.Members["free_slots"].Offset, page.Members["freelist"].Offset
			found := 0
			for _, s := range b.elf.f.Sections {
				if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
					continue
				}
				code, err := b.elf.sectionData(s)
				if err != nil {
					t.Fatal(err)
				}
				all, near := findRefills(code, s.Addr, freeSlots, freelist), findRefillsNear(code, s.Addr, freeSlots, freelist)
				if !slices.Equal(all, near) {
					t.Errorf("section %s: the sweep finds %+v, around the candidates %+v", s.Name, all, near)
				}
				found += len(near)
			}
			if found == 0 {
				t.Error("no site in any section")
			}
		})
	}
}
