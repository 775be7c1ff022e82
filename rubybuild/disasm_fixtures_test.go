package rubybuild

import (
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// The machine code of short functions, copied byte for byte from real
// binaries, with the few facts about each file the evaluator asks for (what a
// GOT slot holds, which PLT stub is __tls_get_addr, where .bss is). They test
// the instruction shapes without any Ruby installed.
type fixFunc struct {
	pc   uint64
	code string // hex
}

type fixEnv struct {
	funcs   map[string]fixFunc
	local   map[uint64]string // tail-call targets
	slots   map[uint64]slot
	callees map[uint64]string
	data    [2]uint64 // [start, end) of the writable data
}

func (e *fixEnv) slotAt(a uint64) slot { return e.slots[a] }
func (e *fixEnv) callee(a uint64, _ bool) string {
	return e.callees[a]
}
func (e *fixEnv) isData(a uint64) bool { return a >= e.data[0] && a < e.data[1] }
func (e *fixEnv) funcCode(fn string) (uint64, []byte, error) {
	f, ok := e.funcs[fn]
	if !ok {
		return 0, nil, errors.New("not exported")
	}
	b, err := hex.DecodeString(f.code)
	return f.pc, b, err
}
func (e *fixEnv) localCode(pc uint64) []byte {
	b, _ := hex.DecodeString(e.local[pc])
	return b
}

// Debian's libruby3.3 3.3.8-2 (trixie, gcc 14, -fPIC -fcf-protection).
func debian338() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			// endbr64; sub; data16 lea GOTPAIR(%rip),%rdi; data16 data16 rex.W call __tls_get_addr@plt;
			// mov (%rax),%rax; mov 0x30(%rax),%rax; mov 0x10(%rax),%rax; add; ret
			"rb_thread_current": {0x235ab0, "f30f1efa4883ec0866488d3d10502200666648e8389ce0ff488b00488b4030488b40104883c408c3"},
			// the same GD access; then ec->cfp and a call
			"rb_block_given_p": {0xe3f60, "f30f1efa4883ec0866488d3d606b3700666648e888b7f5ff488b00488b7810e8bc2218004885c00f95c04883c4080fb6c0c3"},
			// endbr64; lea VMPTR(%rip),%rax; mov (%rax),%rax; test; je; mov 0x518(%rax),%rax; ...
			"rb_during_gc": {0xf9060, "f30f1efa488d057d2b3700488b004885c07415488b80180500000fb64010c0e80583e001c30f1f0031c0c3"},
			"rb_gc_count":  {0xf9090, "f30f1efa488d054d2b3700488b00488b8018050000488b8070050000c3"},
			// local-dynamic TLS (ruby_nt): lea MODSLOT(%rip),%rdi (no data16); call __tls_get_addr@plt;
			// mov 0x0(%rax),%rax (a 32-bit @dtpoff displacement)
			"ruby_thread_has_gvl_p": {0x235750, "f30f1efa4883ec08488d3d014f2200e89c9fe0ff488b80000000004885c074184883b8f8000000000f94c04883c4080fb6c0c30f1f44000031c04883c408c3"},
		},
		slots: map[uint64]slot{
			0x45aad0: {kind: slotTLSModule, value: 0x10, ok: true}, // R_X86_64_DTPMOD64; .got 0x45aad8 holds 0x10
			0x45a660: {kind: slotTLSModule, value: 0, ok: true},    // R_X86_64_DTPMOD64 (the @tlsld slot)
		},
		callees: map[uint64]string{0x3f700: "__tls_get_addr"},
		data:    [2]uint64{0x45b000, 0x470000},
	}
}

// Debian's libruby3.4 3.4.11-1~exp1 (experimental).
func debian3411() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_thread_current":  {0x269970, "f30f1efa4883ec0866488d3d48212700666648e8187eddff488b00488b4030488b40104883c408c3"},
			"rb_keyword_given_p": {0xfcc80, "f30f1efa4883ec0866488d3d38ee3d00666648e8084bf4ff488b00488b78104883c408e938031a00"},
			"rb_errinfo":         {0xffac0, "f30f1efa4883ec0866488d3df8bf3d00666648e8c81cf4ff488b00488b40704883c408c3"},
			"rb_during_gc":       {0x110720, "f30f1efa488d0585c33d00488b004885c07415488b80100500000fb64014c0e80583e001c30f1f0031c0c3"},
			// endbr64; lea VMPTR(%rip),%rax; mov (%rax),%rax; mov 0x510(%rax),%rax; ret
			"rb_gc_get_objspace": {0x10d860, "f30f1efa488d0545f23d00488b00488b8010050000c3"},
			// endbr64; mov TREE(%rip),%rax (the value, no GOT); ...; mov (%rax),%rax (shape_list); lea
			"rb_shape_get_shape_by_id": {0x226830, "f30f1efa488b05954f2c0089ff488d14bf488b00488d04d0c3"},
			// endbr64; mov TREE(%rip),%rdx; mov %rdi,%rax; sub (%rdx),%rax; ...
			"rb_shape_id": {0x226810, "f30f1efa488b15b54f2c004889f8482b0248c1f80369c0cdccccccc3"},
			// endbr64; ...; jmp get_id_serial_entry (a local function)
			"rb_id2str": {0x25eb90, "f30f1efa4889f831f648c1ef04483daa000000480f46f8e9d4deffff"},
			// endbr64; mov COUNTER(%rip),%eax; ret
			"rb_sym_immortal_count": {0x25f000, "f30f1efa8b0576d12700c3"},
		},
		// get_id_serial_entry, its first 96 bytes: an early return, then
		// cmp %edi,COUNTER(%rip) and mov IDS(%rip),%rdi after it.
		local: map[uint64]string{0x25ca80: "4883ec38488d051d00290089fa644c8b0c25280000004c894c24284189f1488b084885c90f84de00000085ff75224531c0488b44242864482b0425280000000f85fd0000004c89c04883c438c30f1f00393daaf6270072d6488b3db1f6270089"},
		slots: map[uint64]slot{
			0x4dbac8: {kind: slotTLSModule, value: 0x10, ok: true},
		},
		callees: map[uint64]string{0x417a0: "__tls_get_addr"},
		data:    [2]uint64{0x4dc000, 0x4f0000},
	}
}

// Debian's libruby3.1 3.1.2-7+deb12u1 (bookworm: no CET). It exports the
// anchors, so the expected values are .dynsym's.
func debian312() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_thread_current": {0x20fd20, "4883ec0866488d3d1cdd1900666648e8bc5ae2ff488b00488b4030488b40104883c408c3"},
			// mov GOT(%rip),%rax (the slot of ruby_current_vm_ptr); mov (%rax),%rax; mov 0x450(%rax),%rax
			"rb_during_gc": {0xcf4e0, "488b05a1e72d00488b00488b80500400000fb64010c0e80583e001c3"},
		},
		slots: map[uint64]slot{
			0x3ada48: {kind: slotTLSModule, value: 0x8, ok: true}, // DTPMOD64 + DTPOFF64 ruby_current_ec
			0x3adc88: {kind: slotAddr, value: 0x3bc370, ok: true}, // GLOB_DAT ruby_current_vm_ptr
		},
		callees: map[uint64]string{0x357f0: "__tls_get_addr"},
		data:    [2]uint64{0x3ae000, 0x3c0000},
	}
}

// Debian's libruby3.3 3.3.14-0+deb13u1 (trixie-security): the code of 3.3.8,
// the variables moved.
func debian3314() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_during_gc": {0xf9220, "f30f1efa488d05bd693700488b004885c07415488b80180500000fb64010c0e80583e001c30f1f0031c0c3"},
			"rb_gc_count":  {0xf9250, "f30f1efa488d058d693700488b00488b8018050000488b8070050000c3"},
		},
		data: [2]uint64{0x45f000, 0x474000},
	}
}

// Debian's libruby3.1 3.1.7+really3.1.2-0+deb12u1 (bookworm-security: the
// 3.1.7 upload reverted): 3.1.2's code, one page further on.
func debian312Security() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_during_gc": {0xcf4e0, "488b05a1f72d00488b00488b80500400000fb64010c0e80583e001c3"},
		},
		slots: map[uint64]slot{
			0x3aec88: {kind: slotAddr, value: 0x3bd370, ok: true}, // GLOB_DAT ruby_current_vm_ptr
		},
		data: [2]uint64{0x3af000, 0x3c2000},
	}
}

// rb_thread_current of a tiny C file (ruby_current_ec a static __thread
// pointer, ec->thread_ptr at 0x30) compiled by Debian bookworm's gcc 12.2
// with -O2 -fcf-protection, in the TLS models Debian's Rubies do not use.
func tlsModels() map[string]*fixEnv {
	one := func(pc uint64, code string) map[string]fixFunc {
		return map[string]fixFunc{"rb_thread_current": {pc, code}}
	}
	return map[string]*fixEnv{
		// -fPIC -mtls-dialect=gnu2: lea DESC(%rip),%rax; call *(%rax); mov %fs:(%rax),%rax
		"TLS descriptor": {funcs: one(0x1110, "f30f1efa4883ec08488d05e12e0000ff1064488b00488b4030488b40104883c408c3"),
			slots: map[uint64]slot{0x4000: {kind: slotTLSDesc, value: 0, ok: true}}},
		// -fPIC -ftls-model=initial-exec: mov GOT(%rip),%rax; mov %fs:(%rax),%rax
		"initial-exec": {funcs: one(0x1100, "f30f1efa488b05b52e000064488b00488b4030488b4010c3"),
			slots: map[uint64]slot{0x3fc0: {kind: slotTPOff, value: 0, ok: true}}},
		// -fPIE -pie: mov %fs:0xfffffffffffffff8,%rax
		"local-exec": {funcs: one(0x1140, "f30f1efa64488b0425f8ffffff488b4030488b4010c3")},
	}
}

// Ruby 4.0.5 built from source with its default flags (gcc 12, -O3 -ggdb3):
// rb_thread_current spills the EC to the stack and reloads it.
func source405() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			// sub $0x18,%rsp; data16 lea GOTPAIR(%rip),%rdi; data16 data16 rex.W call __tls_get_addr@plt;
			// mov (%rax),%rax; mov %rax,0x8(%rsp); mov 0x8(%rsp),%rax; mov 0x30(%rax),%rax; mov 0x10(%rax),%rax
			"rb_thread_current": {0x2fb890, "4883ec1866488d3d6c8f3e00666648e84cedd4ff488b004889442408488b442408488b4030488b40104883c418c3"},
		},
		slots: map[uint64]slot{
			0x6e4808: {kind: slotTLSModule, value: 0x38, ok: true}, // R_X86_64_DTPMOD64; the next slot holds 0x38
		},
		callees: map[uint64]string{0x4a5f0: "__tls_get_addr"},
		data:    [2]uint64{0x6e0000, 0x700000},
	}
}

func TestDisassemblyFixturesCurrentEC(t *testing.T) {
	l := anchorLayout("3.3.8")
	for name, env := range map[string]*fixEnv{"3.3.8": debian338(), "3.4.11": debian3411(), "3.1.2": debian312(), "4.0.5": source405()} {
		tv, how, err := findCurrentEC(env, l)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := map[string]tlsVar{
			"3.3.8":  {model: "general-dynamic", offset: 0x10, hasOffset: true, modGOT: 0x45aad0},
			"3.4.11": {model: "general-dynamic", offset: 0x10, hasOffset: true, modGOT: 0x4dbac8},
			"3.1.2":  {model: "general-dynamic", offset: 0x8, hasOffset: true, modGOT: 0x3ada48},
			"4.0.5":  {model: "general-dynamic", offset: 0x38, hasOffset: true, modGOT: 0x6e4808},
		}[name]
		if tv != want {
			t.Errorf("%s: %+v (%s), want %+v", name, tv, how, want)
		}
	}
	// 3.4.11: three of the four candidates are in the fixture; all agree.
	if _, how, _ := findCurrentEC(debian3411(), l); !strings.Contains(how, "3 of 4") {
		t.Errorf("3.4.11: %q, want 3 of 4 candidates", how)
	}
	// A Layout whose ec->thread_ptr is wrong: rb_thread_current refuses; with
	// no other checked candidate the result is not found.
	bad := anchorLayout("3.3.8")
	bad.ExecutionContext.ThreadPtr, bad.ExecutionContext.CFP = 0x38, 0x18
	if _, _, err := findCurrentEC(debian338(), bad); err == nil || !strings.Contains(err.Error(), "ec->thread_ptr at 56") {
		t.Errorf("wrong layout: %v", err)
	}
	for model, env := range tlsModels() {
		tv, _, err := findCurrentEC(env, l)
		if err != nil {
			t.Errorf("%s: %v", model, err)
			continue
		}
		if tv.model != model {
			t.Errorf("%s: model %q", model, tv.model)
		}
		if model == "local-exec" && (!tv.hasTP || tv.tpOffset != -8) {
			t.Errorf("local-exec: %+v, want TP offset -8", tv)
		}
		if model != "local-exec" && (!tv.hasOffset || tv.offset != 0) {
			t.Errorf("%s: %+v, want TLS offset 0", model, tv)
		}
	}
}

func TestDisassemblyFixturesLocalDynamic(t *testing.T) {
	env := debian338()
	acc, err := traceFunc(env, "ruby_thread_has_gvl_p")
	if err != nil {
		t.Fatal(err)
	}
	tv, ok, why := firstTLSRead(acc, candidate{"ruby_thread_has_gvl_p", 0xf8, "nt->..."})
	if !ok || tv.model != "local-dynamic" || tv.offset != 0 || tv.modGOT != 0x45a660 {
		t.Errorf("%+v %v %s", tv, ok, why)
	}
}

func TestDisassemblyFixturesGlobals(t *testing.T) {
	for _, c := range []struct {
		name string
		env  *fixEnv
		l    *Layout
		vm   uint64
	}{
		{"3.3.8", debian338(), anchorLayout("3.3.8"), 0x46bbe8},
		{"3.4.11", debian3411(), anchorLayout("3.4.11"), 0x4ecab0},
		{"3.1.2", debian312(), anchorLayout("3.1.2"), 0x3bc370},
	} {
		vm, how, err := findVMPtr(c.env, c.l)
		if err != nil || vm != c.vm {
			t.Errorf("%s: ruby_current_vm_ptr %#x (%s) %v, want %#x", c.name, vm, how, err, c.vm)
		}
	}
	l := anchorLayout("3.4.11")
	if tree, _, err := findShapeTree(debian3411(), l); err != nil || tree != 0x4eb7d0 {
		t.Errorf("rb_shape_tree_ptr %#x %v, want 0x4eb7d0", tree, err)
	}
	if syms, how, err := findGlobalSymbols(debian3411(), l); err != nil || syms != 0x4dc180 || !strings.Contains(how, "2 of 2") {
		t.Errorf("ruby_global_symbols %#x (%s) %v, want 0x4dc180", syms, how, err)
	}
	// The wrong vm->objspace offset (3.3's on 3.4): not found, and the
	// reason names what was read.
	if _, _, err := findVMPtr(debian3411(), anchorLayout("3.3.8")); err == nil || !strings.Contains(err.Error(), "vm->objspace at 1304") {
		t.Errorf("3.4.11 with 3.3's objspace: %v", err)
	}
}

// TestDisassemblyFixturesDisagree: two candidates that name different
// variables (3.3.8's rb_during_gc, 3.3.14's rb_gc_count) mean not found.
func TestDisassemblyFixturesDisagree(t *testing.T) {
	env := debian338()
	env.funcs["rb_gc_count"] = debian3314().funcs["rb_gc_count"]
	_, _, err := findVMPtr(env, anchorLayout("3.3.8"))
	if err == nil || !strings.Contains(err.Error(), "disagree") || !strings.Contains(err.Error(), "0x46fbe8") {
		t.Errorf("err = %v, want a disagreement naming both", err)
	}
}

// TestDisassemblyMalformed: truncated and garbage code never panics.
func TestDisassemblyMalformed(t *testing.T) {
	l := anchorLayout("3.3.8")
	gl := builtinTable(t, "3.3.8")
	for _, code := range []string{"", "f3", "f30f1e", "ffffffffffffffff", "e9", "66488d3d", strings.Repeat("90", 4000),
		strings.Repeat("e900000000", 500), "ebfe", strings.Repeat("7400", 300), strings.Repeat("75fc", 300),
		"488b0783e01f4883f814" + strings.Repeat("74fe", 100)} {
		env := &fixEnv{funcs: map[string]fixFunc{}, local: map[uint64]string{0x1005: code}}
		for _, fn := range []string{"rb_thread_current", "rb_during_gc", "rb_id2str", "rb_shape_id", symbolIDFunc} {
			env.funcs[fn] = fixFunc{0x1000, code}
		}
		findCurrentEC(env, l)
		findVMPtr(env, l)
		findGlobalSymbols(env, l)
		findShapeTree(env, l)
		if _, _, err := findDuringGC(env, gl); err == nil {
			t.Errorf("flags.during_gc found in %.40s...", code)
		}
		if _, _, err := findSymbolID(env, gl); err == nil {
			t.Errorf("RSymbol.id found in %.40s...", code)
		}
	}
}

// FuzzDisassemblyFinders feeds arbitrary code to every finder: errors only,
// no panic, bounded work.
func FuzzDisassemblyFinders(f *testing.F) {
	for _, env := range []*fixEnv{debian338(), debian3411(), debian312()} {
		for _, fn := range env.funcs {
			b, _ := hex.DecodeString(fn.code)
			f.Add(b)
		}
	}
	for _, env := range duringGCShapes() {
		b, _ := hex.DecodeString(env.funcs[duringGCFunc].code)
		f.Add(b)
	}
	for _, env := range append([]*fixEnv{sym2idDebian312(), sym2idDebian338(), sym2idDebian3411()}, slices.Collect(maps.Values(sym2idShapes()))...) {
		b, _ := hex.DecodeString(env.funcs[symbolIDFunc].code)
		f.Add(b)
	}
	l := anchorLayout("3.3.8")
	gl := builtinTable(f, "3.3.8")
	f.Fuzz(func(t *testing.T, code []byte) {
		env := debian338()
		env.local = map[uint64]string{}
		for name := range env.funcs {
			env.funcs[name] = fixFunc{0x235ab0, hex.EncodeToString(code)}
		}
		for _, fn := range []string{"rb_id2str", "rb_sym_immortal_count", "rb_shape_id", "rb_keyword_given_p", symbolIDFunc} {
			env.funcs[fn] = fixFunc{0x235ab0, hex.EncodeToString(code)}
		}
		env.local[0x235ab0+uint64(len(code))] = hex.EncodeToString(code)
		findCurrentEC(env, l)
		findCurrentEC(env, nil)
		findVMPtr(env, l)
		findGlobalSymbols(env, l)
		findShapeTree(env, l)
		if m, _, err := findDuringGC(env, gl); err == nil && (m.Offset != gl.GC.Mode.Offset || m.BitSize != 1 ||
			m.BitOffset < 0 || m.BitOffset >= 32 || overlapBits(m, gl.GC.Mode) || overlapBits(m, gl.GC.Compacting)) {
			t.Errorf("flags.during_gc %+v passed the checks", m)
		}
		if off, _, err := findSymbolID(env, gl); err == nil && (off%8 != 0 || off < gl.Basic.Klass+8 || off >= maxSymbolBytes) {
			t.Errorf("RSymbol.id %d passed the checks", off)
		}
	})
}
