package threadlocal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// countingMem counts reads and fails past a limit, so a walk that does not
// stop shows as a failure instead of a hang.
type countingMem struct {
	Memory
	reads, limit int
}

var errTooManyReads = errors.New("too many reads")

func (m *countingMem) ReadAt(p []byte, addr uint64) error {
	m.reads++
	if m.reads > m.limit {
		return errTooManyReads
	}
	return m.Memory.ReadAt(p, addr)
}

// readBound is more reads than a bounded Find or Address may need on any
// input: the link_map and slot tables are bounded well below it.
const readBound = 4 * (maxLinkMaps + maxSlotLists + 1024)

// garbageMem answers every read with bytes from a seeded generator.
type garbageMem struct{ r *rand.Rand }

func (m garbageMem) ReadAt(p []byte, addr uint64) error {
	m.r.Read(p)
	return nil
}

// fillMem answers every read with one byte repeated.
type fillMem byte

func (m fillMem) ReadAt(p []byte, addr uint64) error {
	for i := range p {
		p[i] = byte(m)
	}
	return nil
}

// failMem fails every read.
type failMem struct{}

func (failMem) ReadAt(p []byte, addr uint64) error { return errors.New("unreadable") }

// selfMem answers with each word's own address: every pointer points at itself.
type selfMem struct{}

func (selfMem) ReadAt(p []byte, addr uint64) error {
	for i := 0; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], addr+uint64(i))
	}
	return nil
}

// liveBut answers the real process's memory, except for reads of the size of
// a link_map header, which it forges into an endless, consistent chain from
// the real list's head.
type liveBut struct {
	Memory
	head *uint64
}

func forged(real Memory) liveBut { return liveBut{real, new(uint64)} }

func (m liveBut) ReadAt(p []byte, addr uint64) error {
	if len(p) != linkMapHeader {
		return m.Memory.ReadAt(p, addr)
	}
	if *m.head == 0 {
		*m.head = addr
	}
	clear(p)
	binary.LittleEndian.PutUint64(p[linkMapNext:], addr+0x1000)
	if addr != *m.head {
		binary.LittleEndian.PutUint64(p[linkMapPrev:], addr-0x1000)
	}
	return nil
}

// afterK answers the real process's memory for its first k reads, then lies
// with bad: every stage of a walk meets a lie in turn.
type afterK struct {
	real, bad Memory
	k, reads  int
}

func (m *afterK) ReadAt(p []byte, addr uint64) error {
	m.reads++
	if m.reads <= m.k {
		return m.real.ReadAt(p, addr)
	}
	return m.bad.ReadAt(p, addr)
}

// flaky answers the real memory but garbles one read in four.
type flaky struct {
	real Memory
	r    *rand.Rand
}

func (m flaky) ReadAt(p []byte, addr uint64) error {
	if err := m.real.ReadAt(p, addr); err != nil || m.r.Intn(4) != 0 {
		return err
	}
	m.r.Read(p[:m.r.Intn(len(p))+1])
	return nil
}

// TestHostileMemory runs Find and Address on a real process's maps and
// files with memory that lies at every stage: nothing panics, every walk
// stops, and whatever Find then believes, Address stays bounded.
func TestHostileMemory(t *testing.T) {
	h := startHost(t, build(t))
	h.load(t)
	real := procMem{h.pid}
	good, err := Find(h.pid, real, probes[0].symbol)
	if err != nil {
		t.Fatal(err)
	}
	bads := func(seed int64) map[string]Memory {
		return map[string]Memory{
			"fail": failMem{}, "zeros": fillMem(0), "ones": fillMem(0xff), "self": selfMem{},
			"garbage": garbageMem{rand.New(rand.NewSource(seed))},
		}
	}
	check := func(name string, mem Memory, symbol string) {
		t.Helper()
		cm := &countingMem{Memory: mem, limit: readBound}
		v, err := Find(h.pid, cm, symbol)
		if errors.Is(err, errTooManyReads) {
			t.Errorf("%s, %s: Find did not stop after %d reads", name, symbol, cm.reads)
		}
		if err == nil {
			cm.reads = 0
			if _, _, err := v.Address(cm, 0x7f0000001000); errors.Is(err, errTooManyReads) {
				t.Errorf("%s, %s: Address did not stop", name, symbol)
			}
		}
	}
	for _, p := range probes {
		// How many reads an honest Find takes.
		cm := &countingMem{Memory: real, limit: readBound}
		if _, err := Find(h.pid, cm, p.symbol); err != nil {
			t.Fatal(err)
		}
		for k := 0; k <= cm.reads; k++ {
			for name, bad := range bads(int64(k)) {
				check(fmt.Sprintf("%s after %d reads", name, k), &afterK{real: real, bad: bad, k: k}, p.symbol)
			}
		}
		for seed := int64(0); seed < 64; seed++ {
			check(fmt.Sprintf("flaky %d", seed), flaky{real, rand.New(rand.NewSource(seed))}, p.symbol)
		}
		check("forged link_map chain", forged(real), p.symbol)
	}
	for name, mem := range bads(1) {
		cm := &countingMem{Memory: mem, limit: 16}
		for _, tp := range []uint64{0, 1, 0x7f0000001000, ^uint64(0)} {
			if _, _, err := good.Address(cm, tp); errors.Is(err, errTooManyReads) {
				t.Errorf("%s memory: Address read more than %d times", name, cm.limit)
			}
		}
	}
}

func TestForgedChainStops(t *testing.T) {
	h := startHost(t, build(t))
	h.load(t)
	_, err := Find(h.pid, forged(procMem{h.pid}), probes[0].symbol)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("endless link_map chain: %v, want a bound error", err)
	}
}

// imageMem is a little address space: words at addresses.
type imageMem map[uint64]uint64

func (m imageMem) ReadAt(p []byte, addr uint64) error {
	if len(p)%8 != 0 {
		// r_version is read with its padding, as 8 bytes at least.
		return errors.New("unaligned read")
	}
	for i := 0; i < len(p); i += 8 {
		w, ok := m[addr+uint64(i)]
		if !ok {
			return errors.New("unmapped")
		}
		binary.LittleEndian.PutUint64(p[i:], w)
	}
	return nil
}

// linkMapAt puts a link_map header at addr.
func (m imageMem) linkMapAt(addr, next, prev uint64) {
	m[addr+linkMapAddr] = 0
	m[addr+8] = 0 // l_name
	m[addr+linkMapLD] = 0
	m[addr+linkMapNext] = next
	m[addr+linkMapPrev] = prev
}

func TestWalkLinkMaps(t *testing.T) {
	const rdebug = 0x1000
	tests := []struct {
		name string
		mem  imageMem
		want string // error substring; "" for success
		n    int
	}{
		{"two", func() imageMem {
			m := imageMem{rdebug: 1, rdebug + 8: 0x2000}
			m.linkMapAt(0x2000, 0x3000, 0)
			m.linkMapAt(0x3000, 0, 0x2000)
			return m
		}(), "", 2},
		{"cycle", func() imageMem {
			m := imageMem{rdebug: 1, rdebug + 8: 0x2000}
			m.linkMapAt(0x2000, 0x3000, 0)
			m.linkMapAt(0x3000, 0x2000, 0x2000)
			return m
		}(), "loops", 0},
		{"self", func() imageMem {
			m := imageMem{rdebug: 1, rdebug + 8: 0x2000}
			m.linkMapAt(0x2000, 0x2000, 0)
			return m
		}(), "loops", 0},
		{"bad prev", func() imageMem {
			m := imageMem{rdebug: 1, rdebug + 8: 0x2000}
			m.linkMapAt(0x2000, 0x3000, 0)
			m.linkMapAt(0x3000, 0, 0x9000)
			return m
		}(), "l_prev", 0},
		{"namespaces loop", func() imageMem {
			m := imageMem{rdebug: 2, rdebug + 8: 0x2000, rdebug + rDebugNext: rdebug}
			m.linkMapAt(0x2000, 0, 0)
			return m
		}(), "namespaces", 0},
		{"two namespaces", func() imageMem {
			m := imageMem{rdebug: 2, rdebug + 8: 0x2000, rdebug + rDebugNext: 0x5000,
				0x5000: 2, 0x5008: 0x6000, 0x5000 + rDebugNext: 0}
			m.linkMapAt(0x2000, 0, 0)
			m.linkMapAt(0x6000, 0, 0)
			return m
		}(), "", 2},
		{"not set up", imageMem{rdebug: 0, rdebug + 8: 0}, "version", 0},
		{"unmapped", imageMem{rdebug: 1, rdebug + 8: 0x2000}, "link_map at", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := walkLinkMaps(tc.mem, rdebug)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && len(got) != tc.n:
				t.Fatalf("%d link maps, want %d", len(got), tc.n)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one about %q", err, tc.want)
			}
		})
	}
}

// endlessChain is a consistent link_map list that never ends.
type endlessChain struct{}

func (endlessChain) ReadAt(p []byte, addr uint64) error {
	clear(p)
	if addr == 0x1000 { // r_debug
		binary.LittleEndian.PutUint32(p, 1)
		binary.LittleEndian.PutUint64(p[rDebugMap:], 0x10000)
		return nil
	}
	binary.LittleEndian.PutUint64(p[linkMapNext:], addr+0x1000)
	if addr > 0x10000 {
		binary.LittleEndian.PutUint64(p[linkMapPrev:], addr-0x1000)
	}
	return nil
}

func TestWalkLinkMapsBounded(t *testing.T) {
	cm := &countingMem{Memory: endlessChain{}, limit: readBound}
	_, err := walkLinkMaps(cm, 0x1000)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("endless list: %v, want a bound error", err)
	}
	if cm.reads > maxLinkMaps+2 {
		t.Errorf("%d reads for at most %d entries", cm.reads, maxLinkMaps)
	}
}

func TestGenerationBounded(t *testing.T) {
	l := &layout{slotList: 0, listLen: 0, listNext: 8, listSlots: 16, slotSize: 16, slotGen: 0, slotMap: 8}
	tests := []struct {
		name string
		mem  Memory
	}{
		// Each list entry has 1 slot and points at the next: never reaches modid.
		{"endless", selfLenOne{}},
		{"garbage", garbageMem{rand.New(rand.NewSource(7))}},
		{"ones", fillMem(0xff)},
		{"fail", failMem{}},
	}
	for _, tc := range tests {
		cm := &countingMem{Memory: tc.mem, limit: readBound}
		if _, err := l.generation(cm, 0x1000, 1<<19, 0x5000); err == nil || errors.Is(err, errTooManyReads) {
			t.Errorf("%s: %v after %d reads, want a bound error", tc.name, err, cm.reads)
		}
	}
	m := imageMem{
		0x1000: 0x2000,            // _dl_tls_dtv_slotinfo_list
		0x2000: 2, 0x2008: 0x3000, // len 2, next
		0x3000: 3, 0x3008: 0, // len 3, next
		0x3010 + 2*16: 7, 0x3018 + 32: 0x5000, // slotinfo[2] of the second: modid 4
	}
	if gen, err := l.generation(m, 0x1000, 4, 0x5000); err != nil || gen != 7 {
		t.Errorf("generation = %d, %v; want 7", gen, err)
	}
	if _, err := l.generation(m, 0x1000, 4, 0x6000); err == nil {
		t.Error("a slot naming another link_map was believed")
	}
	if _, err := l.generation(m, 0x1000, 5, 0x5000); err == nil {
		t.Error("a module id past the table was believed")
	}
}

// selfLenOne is a slot table of endless one-slot entries.
type selfLenOne struct{}

func (selfLenOne) ReadAt(p []byte, addr uint64) error {
	clear(p)
	switch addr % 16 {
	case 0: // len (or the list head at 0x1000)
		if addr == 0x1000 {
			binary.LittleEndian.PutUint64(p, 0x10000)
		} else {
			binary.LittleEndian.PutUint64(p, 1)
		}
	case 8: // next
		binary.LittleEndian.PutUint64(p, addr+0x1000-8)
	}
	return nil
}

func TestAddressRejectsBadVar(t *testing.T) {
	for _, v := range []*Var{nil, {}, {ModID: 1}, {ModID: 1, DTVEntrySize: 16, DTVVal: 12}, {ModID: maxModID + 1, DTVEntrySize: 16}} {
		if _, _, err := v.Address(fillMem(0), 0x1000); err == nil {
			t.Errorf("Address of %+v: no error", v)
		}
	}
}

func FuzzWalkLinkMaps(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x10})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0x30, 0x10, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, image []byte) {
		cm := &countingMem{Memory: sliceMem{base: 0x1000, b: image}, limit: readBound}
		walkLinkMaps(cm, 0x1000)
		if cm.reads > readBound {
			t.Fatalf("%d reads", cm.reads)
		}
	})
}

// sliceMem is an address space of one byte slice at base.
type sliceMem struct {
	base uint64
	b    []byte
}

func (m sliceMem) ReadAt(p []byte, addr uint64) error {
	if addr < m.base || addr-m.base > uint64(len(m.b)) || uint64(len(p)) > uint64(len(m.b))-(addr-m.base) {
		return errors.New("unmapped")
	}
	copy(p, m.b[addr-m.base:])
	return nil
}
