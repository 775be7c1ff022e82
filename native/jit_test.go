package native

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

func TestCallEndsAt(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		want bool
	}{
		{"call rel32", []byte{0x90, 0xe8, 1, 2, 3, 4}, true},
		{"call rax", []byte{0x48, 0x89, 0xc7, 0xff, 0xd0}, true},
		{"call r13", []byte{0x90, 0x41, 0xff, 0xd5}, true},
		{"call [rax+8]", []byte{0x90, 0xff, 0x50, 0x08}, true},
		{"call [rip+disp32]", []byte{0x90, 0xff, 0x15, 1, 2, 3, 4}, true},
		{"notrack call rax", []byte{0x90, 0x3e, 0xff, 0xd0}, true},
		{"mov rdi, rax", []byte{0x90, 0x90, 0x48, 0x89, 0xc7}, false},
		{"jmp rel32", []byte{0x90, 0xe9, 1, 2, 3, 4}, false},
		{"ret", []byte{0x90, 0x90, 0xc3}, false},
		{"jmp rax", []byte{0x90, 0xff, 0xe0}, false},
	} {
		code := make([]byte, maxCallLen-len(c.code), maxCallLen)
		for i := range code {
			code[i] = 0x90 // nop
		}
		code = append(code, c.code...)
		if got := callEndsAt(code[len(code)-maxCallLen:]); got != c.want {
			t.Errorf("%s: callEndsAt %v, want %v", c.name, got, c.want)
		}
	}
}

// libcCallSite finds, in the machine's libc, the address right after a call
// instruction inside a function that has call frame information: a return
// address a JIT frame could hold.
func libcCallSite(t *testing.T) (path string, ret, fileOff uint64) {
	opened := false
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		opened = true
		text := f.Section(".text")
		if text == nil {
			continue
		}
		data, err := text.Data()
		if err != nil {
			t.Fatal(err)
		}
		o := LoadObject(p)
		if o.Err() != nil {
			t.Fatal(o.Err())
		}
		for off := 4096; off < len(data); {
			inst, err := x86asm.Decode(data[off:], 64)
			if err != nil {
				off++
				continue
			}
			off += inst.Len
			vaddr := text.Addr + uint64(off)
			if inst.Op == x86asm.CALL && o.frameAt(vaddr-1) != nil && o.frameAt(vaddr) != nil {
				return p, vaddr, vaddr - text.Addr + text.Offset
			}
		}
	}
	if !opened {
		testskip.IfNotSupported(t, testskip.Missing("an x86_64 libc in /lib/x86_64-linux-gnu", "the test decodes x86_64 code", nil))
	}
	t.Fatal("no call site with call frame information on both sides found in the x86_64 libc")
	return
}

// TestJITStep steps over a JIT frame on a made-up stack whose return
// address is a real call site in libc, with and without a frame pointer.
func TestJITStep(t *testing.T) {
	libc, retVAddr, retOff := libcCallSite(t)
	const libcBase, jitBase, sp = 0x7f0000000000, 0x7e0000000000, 0x7ffd00001000
	maps := &Maps{}
	maps.Add(Mapping{Start: libcBase, Limit: libcBase + 64<<20, Path: libc, Exec: true})
	maps.Add(Mapping{Start: jitBase, Limit: jitBase + 1<<20, Path: "//anon", Exec: true})
	objs := &Objects{}
	ret := libcBase + retOff
	if o := objs.Get(libc); o.VAddr(retOff) != retVAddr {
		t.Fatalf("libc file offset %#x is vaddr %#x, want %#x", retOff, o.VAddr(retOff), retVAddr)
	}

	stack := func(slots ...uint64) []byte {
		b := make([]byte, 8*len(slots))
		for i, v := range slots {
			binary.LittleEndian.PutUint64(b[8*i:], v)
		}
		return b
	}
	regs := func(rbp uint64) []uint64 {
		r := make([]uint64, len(perfToDWARF))
		r[6], r[7], r[8] = rbp, sp, jitBase+0x100 // BP, SP, IP
		return r
	}
	for _, c := range []struct {
		name    string
		rbp     uint64
		stack   []byte
		wantRet uint64
		wantRBP uint64
	}{
		// YJIT's entry pushes r13, r12 and rbx below the return address.
		{"no frame pointer", 0x1111, stack(0x8, 0x7ffd00002000, 0x14, libcBase+1, ret, 0), ret, 0x1111},
		// --yjit-perf: push rbp; mov rbp, rsp; push rbp; then the three.
		{"frame pointer", sp + 8*4, stack(0x8, 0x10, 0x18, sp+8*4, 0x2222, ret), ret, 0x2222},
		{"no return address", 0x1111, stack(0x8, 0x10, libcBase+1, 0x18), 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			frames := Unwind(nil, regs(c.rbp), c.stack, maps, objs)
			if c.wantRet == 0 {
				if len(frames) != 1 {
					t.Fatalf("%d frames, want the JIT frame alone", len(frames))
				}
				return
			}
			if len(frames) < 2 || frames[1].PC != c.wantRet {
				t.Fatalf("frames %+v: want the JIT frame, then %#x", frames, c.wantRet)
			}
			var r [dwarfMax]uint64
			var known [dwarfMax]bool
			r[dwarfRSP], r[dwarfRBP], known[dwarfRSP], known[dwarfRBP] = sp, c.rbp, true, true
			read := func(addr uint64) (uint64, bool) {
				if addr < sp || addr+8 > sp+uint64(len(c.stack)) {
					return 0, false
				}
				return binary.LittleEndian.Uint64(c.stack[addr-sp:]), true
			}
			next, nextKnown, ok := jitStep(&r, &known, read, maps, objs)
			if !ok || next[dwarfRBP] != c.wantRBP || !nextKnown[dwarfRBP] {
				t.Errorf("caller rbp %#x (known %v), want %#x", next[dwarfRBP], nextKnown[dwarfRBP], c.wantRBP)
			}
		})
	}
}
