package rubybuild

import (
	"maps"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// wantSymbolID is where DWARF puts RSymbol.id in every source build here
// (3.1.2 shared, 3.3.8 static and CET, 3.4.5 shared): after RBasic, hashval
// and fstr. The fixture tests check the code gives this;
// TestSymbolIDRealRubies checks it against DWARF itself.
const wantSymbolID = 32

// tableWithoutSymbolID is the built-in table of version (x86_64) without
// RSymbol.id, as a table generated before it was read had it (the fallback
// fills it in from rb_sym2id), with constants of its own to change.
func tableWithoutSymbolID(t testing.TB, version string) *Layout {
	t.Helper()
	l := tableWithout(t, version, "RSymbol", "id")
	if l.Symbol.ID >= 0 || l.Constants["RUBY_T_MASK"] == 0 {
		t.Fatalf("table %s: RSymbol.id %d, RUBY_T_MASK %#x: want a table without the ID and with the mask",
			version, l.Symbol.ID, l.Constants["RUBY_T_MASK"])
	}
	// Without RUBY_T_SYMBOL too (tables before it was read), which the
	// tests add back where they want it.
	l.Constants = maps.Clone(l.Constants)
	delete(l.Constants, "RUBY_T_SYMBOL")
	return l
}

// sym2idEnv is a file whose rb_sym2id is code at pc; local holds tail-call
// targets, callees the PLT stubs it calls that the finder names.
func sym2idEnv(pc uint64, code string, local map[uint64]string, callees map[uint64]string) *fixEnv {
	return &fixEnv{funcs: map[string]fixFunc{symbolIDFunc: {pc, code}}, local: local, callees: callees}
}

// rb_sym2id of Debian's libruby3.1 3.1.2-7+deb12u1 (bookworm, gcc 12, no
// CET): the special-constant checks, the type check, the VM lock,
// rb_objspace_garbage_object_p (dsymbol_check), mov 0x20(%rbx),%rbp and a
// jump to the shared epilogue (mov %rbp,%rax; ret); the registration of a new
// ID (or %rax,%rbp; mov %rbp,0x20(%rbx)) after it, the reallocation of a
// garbage Symbol at the end.
func sym2idDebian312() *fixEnv {
	return sym2idEnv(0x207fc0,
		"4155415455534889fb4883ec2864488b042528000000488944241831c04080ff0c0f848900000040f6c70774234889dfe81ba5eaff488d357cfe0b00"+
			"4889c2488b05e2551a00488b3831c0e810f7e2ff48f7c7f7ffffff74d4488b0783e01f4883f81475c84c8b25c4551a0049833c24000f841901000048"+
			"89dfe8d157ecff85c00f85b1000000488b6b2048f7c5f1ffffff744c49833c2400751c488d7c240ce8bbc2e2ffeb10660f1f84000000000048c1eb08"+
			"4889dd488b44241864482b0425280000000f85ed0000004883c4284889e85b5d415c415dc30f1f80000000008b051a611a004c8b6b188d780183f8ff"+
			"0f84a900000089f8893d02611a0048c1e0044809c5483da900000048896b200f46f84c89ee4889dae8c3e1ffff488b3df4601a004c89eee824c7e2ff"+
			"e963ffffff0f1f8000000000488b6b184c8b6b2031d2488d74241048c7431800000000488b3db2601a004183e50e48896c2410e89cb4e2ff85c07455"+
			"4889efe840f5e2ff4c89e94889ee4889c2488b05d0591a00488b38e878e3ffff4889c3e9f7feffff488d7c240ce896bfe2ffe9d8feffff48c74320ff"+
			"ffffffbfffffffff48c7c5ffffffffe95affffffe813ede2ff4889de4889efe848e2ffff", nil, map[uint64]string{0x37720: "rb_raise"})
}

// Debian's libruby3.1 3.1.7+really3.1.2-0+deb12u1 (bookworm-security): the
// same code, moved.
func sym2idDebian312Security() *fixEnv {
	return sym2idEnv(0x208a30,
		"4155415455534889fb4883ec2864488b042528000000488944241831c04080ff0c0f848900000040f6c70774234889dfe8ab9aeaff488d350c040c00"+
			"4889c2488b05725b1a00488b3831c0e8a0ece2ff48f7c7f7ffffff74d4488b0783e01f4883f81475c84c8b25545b1a0049833c24000f841901000048"+
			"89dfe8614decff85c00f85b1000000488b6b2048f7c5f1ffffff744c49833c2400751c488d7c240ce84bb8e2ffeb10660f1f84000000000048c1eb08"+
			"4889dd488b44241864482b0425280000000f85ed0000004883c4284889e85b5d415c415dc30f1f80000000008b05aa661a004c8b6b188d780183f8ff"+
			"0f84a900000089f8893d92661a0048c1e0044809c5483da900000048896b200f46f84c89ee4889dae8c3e1ffff488b3d84661a004c89eee8b4bce2ff"+
			"e963ffffff0f1f8000000000488b6b184c8b6b2031d2488d74241048c7431800000000488b3d42661a004183e50e48896c2410e82caae2ff85c07455"+
			"4889efe8d0eae2ff4c89e94889ee4889c2488b05605f1a00488b38e878e3ffff4889c3e9f7feffff488d7c240ce826b5e2ffe9d8feffff48c74320ff"+
			"ffffffbfffffffff48c7c5ffffffffe95affffffe8a3e2e2ff4889de4889efe848e2ffff", nil, map[uint64]string{0x37720: "rb_raise"})
}

// Debian's libruby3.3 3.3.8-2 (trixie, gcc 14, -fcf-protection).
func sym2idDebian338() *fixEnv {
	return sym2idEnv(0x22b6f0,
		"f30f1efa4155415455534883ec2864488b1c252800000048895c24184889fb4080ff0c7433f6c30775054885db75594889dfe8690cebff488d353add"+
			"0e004889c2488b0598ef2200488b3831c0e87e5de1ff660f1f44000048c1eb084889dd488b44241864482b0425280000000f85400100004883c42848"+
			"89e85b5d415c415dc30f1f8000000000488b0383e01f4883f814759b4c8d255504240049833c24000f84ea0000004889dfe822c6ecff85c0757e488b"+
			"6b2048f7c5f1ffffff741949833c24007599488d7c240ce8e04e0600eb8d660f1f4400008b3d92f922004c8b6b1883ffff0f84b40000008d47014889"+
			"c7890579f9220048c1e0044809c589fac1e20448896b20483daa0000000f42fa4c89ee4889dae8d5e2ffff488b3d66f922004c89eee8d62ee1ffeb93"+
			"0f1f4000488b6b184c8b6b2031d2488d74241048c7431800000000488b3d2af922004183e50e48896c2410e8241de1ff85c00f84b2a5e1ff4889efe8"+
			"a45be1ff4c89e94889ee4889c2488b051cf32200488b38e8cce1ffff4889c3e926ffffff0f1f4000488d7c240ce8264c0600e907ffffff48c74320ff"+
			"ffffff48c7c5ffffffffe95dffffffe87853e1ff", nil, map[uint64]string{0x414c0: "rb_raise"})
}

// Debian's libruby3.3 3.3.14-0+deb13u1 (trixie-security).
func sym2idDebian3314() *fixEnv {
	return sym2idEnv(0x22eea0,
		"f30f1efa4155415455534883ec2864488b1c252800000048895c24184889fb4080ff0c7433f6c30775054885db75594889dfe8e9d5eaff488d3562d6"+
			"0e004889c2488b05e0f72200488b3831c0e8be25e1ff660f1f44000048c1eb084889dd488b44241864482b0425280000000f85400100004883c42848"+
			"89e85b5d415c415dc30f1f8000000000488b0383e01f4883f814759b4c8d25a50c240049833c24000f84ea0000004889dfe83290ecff85c0757e488b"+
			"6b2048f7c5f1ffffff741949833c24007599488d7c240ce850530600eb8d660f1f4400008b3de20123004c8b6b1883ffff0f84b40000008d47014889"+
			"c78905c901230048c1e0044809c589fac1e20448896b20483daa0000000f42fa4c89ee4889dae805e3ffff488b3db60123004c89eee816f7e0ffeb93"+
			"0f1f4000488b6b184c8b6b2031d2488d74241048c7431800000000488b3d7a0123004183e50e48896c2410e874e5e0ff85c00f84e96de1ff4889efe8"+
			"e423e1ff4c89e94889ee4889c2488b0564fb2200488b38e8fce1ffff4889c3e926ffffff0f1f4000488d7c240ce896500600e907ffffff48c74320ff"+
			"ffffff48c7c5ffffffffe95dffffffe8b81be1ff", nil, map[uint64]string{0x414b0: "rb_raise"})
}

// Debian's libruby3.4 3.4.11-1~exp1 (experimental): the argument in %rcx,
// spilled to (%rsp) around the calls, the ID in %r8.
func sym2idDebian3411() *fixEnv {
	return sym2idEnv(0x25e730,
		"f30f1efa4883ec4864488b0c252800000048894c24284889f94080ff0c0f849d0000004885c975304889cf48895c24384c89742440e89660e9ff488b"+
			"1567cf2700488d3580891200488b3a4889c231c0e81b4fdeff0f1f00f6c10775cb488b0183e01f4883f81475bf488d0508e32800488338000f844e01"+
			"00004889cf48890c24e87a30deff488b0c2485c00f85be0000004c8b412049f7c0f1ffffff7449488d05d2e2280048833800751b488d7c241c4c8904"+
			"24e826fa06004c8b0424eb0748c1e9084989c8488b44242864482b0425280000000f85100100004c89c04883c448c30f1f4400008b3d62d92700488b"+
			"711883ffff0f84e40000008d47014889c7890549d9270048c1e00489fa4909c0c1e204483dab0000000f42fa4c8941204889ca4c8944240848893424"+
			"e88fe0ffff488b3424488b3d2cd92700e86f1fdeff4c8b442408e954ffffff0f1f440000488b7120488b411848895c243831d24c89742440488b3ded"+
			"d8270048c741180000000083e60e4889c34989f6488d7424204889442420e8950cdeff85c00f84d89bdeff4889dfe8f54cdeff488b15b6d227004c89"+
			"f14889de488b3a4889c2e84ddfffff488b5c24384c8b7424404889c1e9cdfeffff0f1f00488d7c241c48890c24e83af70600488b0c24e99bfeffff49"+
			"c7c0ffffffffe931ffffff48895c24384c89742440e8a644deff", nil, map[uint64]string{0x436a0: "rb_raise"})
}

// Ruby 3.3.8 built from source as a static ruby (gcc 12, -O3): rb_sym2id is
// the checks and a tail call to rb_sym2id.part.0, a local function (its code
// up to the next FDE).
func sym2idSource338Static() *fixEnv {
	return sym2idEnv(0x1ed220,
		"4080ff0c743240f6c70775054885ff752f4883ec08e836472300488b3dffee4000488d3548f128004889c231c0e8de592300660f1f4400004889f848"+
			"c1e808c3488b0783e01f4883f81475c5e96fb3ffff", map[uint64]string{
			0x1e85e0: "4155415455534889fb4883ec2864488b042528000000488944241831c048833d5b4d40000074514889dfe8219de8ff85c0755d488b6b2048f7c5f1ff" +
				"ffff0f841c01000048833d344d4000000f846e010000488b44241864482b0425280000000f85900100004883c4284889e85b5d415c415dc30f1f4000" +
				"488d7c240ce8eef107004889dfe8c69ce8ff85c074a56690488b6b184c8b632031d2488d74241048c7431800000000488b3d3af33f004183e40e4889" +
				"6c2410e8244efdff85c00f8459cae5ff4889efe8b4042200488b3da53b4000be340000004989c5e8e08ee9ff4c89ef4889c3e8f5da21004889df89c6" +
				"e8bb0122004889dfe88322040048896b1840f6c50775094885ed0f85c00000004c8963204889efe88435feff488b3dc5f23f004889ee4889da48d1f8" +
				"48894310e89b47fdff488b3dbcf23f004889eeba14000000e84721eaff488b6b2048f7c5f1ffffff0f85eafeffff660f1f4400008b057af23f004c8b" +
				"63188d780183f8ff746e89f8893d66f23f0048c1e0044809c5483da900000048896b200f46f84889da4c89e6e8e7fcffff488b3d58f23f004c89e6e8" +
				"e8d0eaff48833dd04b4000000f859cfeffff662e0f1f840000000000488d7c240ce846f20700e983feffff904889ee4889dfe8a5aee8ffe930ffffff" +
				"48c74320ffffffffbfffffffff48c7c5ffffffffeb98e815a4e5ff0f1f440000"}, nil)
}

// sym2idShapes are testdata/sym2id.c compiled the ways its comment says, by
// name.
func sym2idShapes() map[string]*fixEnv {
	return map[string]*fixEnv{
		"gcc -O2": sym2idEnv(0x1160,
			"f30f1efa554889f85348c1e8084889fb4883ec284080ff0c745440f6c7070f85cc0000004885ff0f84c3000000488b0783e01f4883f8140f85b30000"+
				"00488b2d142e000048837d0000742d4889dfe88dfeffff85c00f8585000000488b432048a9f1ffffff744148837d0000741a4883c4285b5dc30f1f00"+
				"488d7c241ce88efeffffebc70f1f4000488d7c241c4889442408e839feffff488b4424084883c4285b5dc30f1f440000488b15c92d0000488b73188b"+
				"0a8d7901893a89fa48c1e2044809d04889da488943204889442408e81cfeffff488b442408eb8c0f1f4400004889dfe838feffff4889c3e96bffffff"+
				"488d3da90d000031c0e802feffff", nil, nil),
		"gcc -O1": sym2idEnv(0x1159,
			"f30f1efa55534883ec184889fb4080ff0c746040f6c7070f85ad0000004885ff0f84a4000000488b0783e01f4883f8140f8594000000488b05222e00"+
				"004883380074394889dfe89cfeffff85c07539488b6b2048f7c5f1ffffff7439488b05fc2d00004883380074554889e84883c4185b5dc348c1eb0848"+
				"89ddebed488d7c240ce891feffffebbb4889dfe897feffff4889c3ebba488b7318488b05df2d00008b088d7901893889f848c1e0044809c548896b20"+
				"4889dae83bfeffffeb9e488d7c240ce80ffeffffeb9f488d3dd60d0000b800000000e82cfeffff", nil, nil),
		"gcc -Os": sym2idEnv(0x1159,
			"f30f1efa415455534889fb4883ec104080ff0c750c48c1eb084889dde9a300000040f6c7070f858b0000004885ff0f8482000000488b0783e01f4883"+
				"f81475764c8b25182e000049833c2400750a488d7c240ce8bffeffff4889dfe887feffff85c0740b4889dfe8bbfeffff4889c3488b6b2048f7c5f1ff"+
				"ffff7527488b05fc2d0000488b73184889da8b088d7901893889f848c1e0044809c548896b20e854feffff49833c2400751a488d7c240ce823feffff"+
				"eb0e488d3dea0d000031c0e843feffff4883c4104889e85b5d415cc3", nil, nil),
		"clang-14 -O2": sym2idEnv(0x1160,
			"f30f1efa41574156534883ec104889fb80fb0c750948c1eb084989deeb654885db0f84a600000089d883e0074885c00f85980000008b0383e01f83f8"+
				"140f858a0000004c8b3d1e2e000049833f00750a488d7c240ce8a6feffff4889dfe87efeffff85c0752a4c8b732049f7c6f1ffffff742a49833f0075"+
				"0a488d7c240ce88dfeffff4c89f04883c4105b415e415fc34889dfe858feffff4889c3ebc9488b7318488b05c82d00008b3883c70189384889f848c1"+
				"e0044909c64c8973204889dae85bfeffff49833f0075b8ebac488d3dcc0d000031c0e8f5fdffff", nil, nil),
		"clang-14 -Os": sym2idEnv(0x115c,
			"f30f1efa41574156534883ec104889fb80fb0c750948c1eb084989deeb654885db0f849f00000089d883e0074885c00f85910000008b0383e01f83f8"+
				"140f85830000004c8b3d222e000049833f00750a488d7c240ce8aafeffff4889dfe882feffff85c0752a4c8b732049f7c6f1ffffff742a49833f0075"+
				"0a488d7c240ce891feffff4c89f04883c4105b415e415fc34889dfe85cfeffff4889c3ebc9488b7318488b05cc2d00008b38ffc789384889f848c1e0"+
				"044909c64c8973204889dae860feffffebad488d3dd70d000031c0e800feffff", nil, nil),
		"gcc -O2 -DOUT_OF_LINE": sym2idEnv(0x1230,
			"f30f1efa4080ff0c742640f6c70775284885ff7423488b0783e01f4883f8147517e90affffff662e0f1f8400000000004889f848c1e808c350488d3d"+
				"900d000031c0e8e9fdffff", map[uint64]string{
				0x1160: "415455534889fb4883ec104c8b25462e000049833c2400742f4889dfe8bffeffff85c0753b488b6b2048f7c5f1ffffff744e49833c240074754883c4" +
					"104889e85b5d415cc30f1f00488d7c240ce8befeffff4889dfe886feffff85c074c766904889dfe8b8feffff4889c3488b6b2048f7c5f1ffffff75ba" +
					"0f1f840000000000488b05f12d0000488b73184889da8b088d7901893889f848c1e0044809c548896b20e849feffff49833c2400758b488d7c240ce8" +
					"18feffff4883c4104889e85b5d415cc3"}, nil),
		"gcc -O0": sym2idEnv(0x123f,
			"f30f1efa554889e54883ec1048897df8488b45f80fb6c04883f80c750a488b45f848c1e808eb45488b45f883e0074885c0752548837df800741e488b"+
				"45f8488b0083e01f4883f814750e488b45f84889c7e8c4feffffeb14488d05620d00004889c7b800000000e8b5fdffffc9c3", nil, nil),
		"gcc -O2 -DTWO_MEMBERS": sym2idEnv(0x1150,
			"f30f1efa41544889f85548c1e808534889fb4883ec204080ff0c745040f6c7070f85970000004885ff0f848e000000488b074989fc83e01f4883f814"+
				"757f488b2d2b2e000048837d0000742c4889dfe89cfeffff85c07558498b44242048a9f1ffffff744348837d0000741c4883c4205b5d415cc30f1f00"+
				"488d7c241ce88efeffffebc80f1f4000488d7c241c4889442408e849feffff488b4424084883c4205b5d415cc30f1f00498b442418ebb6904889dfe8"+
				"68feffff4989c4eb9b488d3dec0d000031c0e835feffff", nil, nil),
		"gcc -O2 -DT_SYMBOL=5": sym2idEnv(0x1160,
			"f30f1efa554889f85348c1e8084889fb4883ec284080ff0c745440f6c7070f85cc0000004885ff0f84c3000000488b0783e01f4883f8050f85b30000"+
				"00488b2d142e000048837d0000742d4889dfe88dfeffff85c00f8585000000488b432048a9f1ffffff744148837d0000741a4883c4285b5dc30f1f00"+
				"488d7c241ce88efeffffebc70f1f4000488d7c241c4889442408e839feffff488b4424084883c4285b5dc30f1f440000488b15c92d0000488b73188b"+
				"0a8d7901893a89fa48c1e2044809d04889da488943204889442408e81cfeffff488b442408eb8c0f1f4400004889dfe838feffff4889c3e96bffffff"+
				"488d3da90d000031c0e802feffff", nil, nil),
	}
}

// patchHex replaces the one whole-byte occurrence of old in a fixture's code.
func patchHex(t *testing.T, env *fixEnv, old, new string) *fixEnv {
	t.Helper()
	f := env.funcs[symbolIDFunc]
	at := -1
	for i := 0; i+len(old) <= len(f.code); i += 2 {
		if f.code[i:i+len(old)] == old {
			if at >= 0 {
				t.Fatalf("%s occurs twice in the fixture", old)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("%s is not in the fixture", old)
	}
	f.code = f.code[:at] + new + f.code[at+len(old):]
	env.funcs[symbolIDFunc] = f
	return env
}

// TestDisassemblyFixturesSymbolID: every build's rb_sym2id in the fixtures
// gives the RSymbol.id DWARF gives the source builds, with the table the
// build gets (no RUBY_T_SYMBOL) and with RUBY_T_SYMBOL added.
func TestDisassemblyFixturesSymbolID(t *testing.T) {
	for _, c := range []struct {
		name  string
		env   *fixEnv
		table string // the table the build gets (the nearest for 3.3.14 and 3.4.11)
	}{
		{"Debian 3.1.2", sym2idDebian312(), "3.1.2"},
		{"Debian 3.1.7+really3.1.2", sym2idDebian312Security(), "3.1.2"},
		{"Debian 3.3.8", sym2idDebian338(), "3.3.8"},
		{"Debian 3.3.14", sym2idDebian3314(), "3.3.11"},
		{"Debian 3.4.11", sym2idDebian3411(), "3.4.9"},
		{"source 3.3.8 static", sym2idSource338Static(), "3.3.8"},
	} {
		l := tableWithoutSymbolID(t, c.table)
		for _, tsym := range []bool{false, true} {
			if tsym {
				l.Constants["RUBY_T_SYMBOL"] = 0x14 // what DWARF says in every source build
			}
			off, how, err := findSymbolID(c.env, l)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			const want = "disassembly of rb_sym2id (8-byte load at sym+32 returned after the type check " +
				"flags&0x1f == 0x14, stored there when it assigns an ID)"
			if off != wantSymbolID || how != want {
				t.Errorf("%s: %d (%s), want %d (%s)", c.name, off, how, wantSymbolID, want)
			}
		}
	}
}

// TestDisassemblyFixturesSymbolIDShapes: the shapes gcc and clang give the
// function read the same; a frame-pointer build, a function that returns two
// members, and one that checks another type are refused.
func TestDisassemblyFixturesSymbolIDShapes(t *testing.T) {
	refused := map[string]string{
		"gcc -O0":               "rb_sym2id: no check of the argument's type (flags&0x1f at +0) this decoder can follow",
		"gcc -O2 -DTWO_MEMBERS": "rb_sym2id: returns the 8-byte member at sym+32 and the 8-byte member at sym+24 after its type check: ambiguous",
		"gcc -O2 -DT_SYMBOL=5":  "rb_sym2id: checks the argument's type against 0x5, which is RUBY_T_STRING",
	}
	for name, env := range sym2idShapes() {
		off, how, err := findSymbolID(env, tableWithoutSymbolID(t, "3.3.8"))
		if want, ok := refused[name]; ok {
			if err == nil || err.Error() != want {
				t.Errorf("%s: %d (%s) %v, want %q", name, off, how, err, want)
			}
			continue
		}
		if err != nil || off != wantSymbolID {
			t.Errorf("%s: %d (%s) %v, want %d", name, off, how, err, wantSymbolID)
		}
	}
}

// TestDisassemblyFixturesSymbolIDRefused: a layout that does not fit the
// code, code that is not rb_sym2id's, and an implausible member give not
// found, naming what the code does.
func TestDisassemblyFixturesSymbolIDRefused(t *testing.T) {
	table := func() *Layout { return tableWithoutSymbolID(t, "3.3.8") }
	for _, c := range []struct {
		name string
		env  *fixEnv
		l    func() *Layout
		want string
	}{
		{"another RUBY_T_SYMBOL", sym2idDebian338(), func() *Layout {
			l := table()
			l.Constants["RUBY_T_SYMBOL"] = 0x5
			return l
		}, "checks the argument's type against 0x14, not RUBY_T_SYMBOL (0x5)"},
		{"another RUBY_T_MASK", sym2idDebian338(), func() *Layout {
			l := table()
			l.Constants["RUBY_T_MASK"] = 0x3f
			return l
		}, "no check of the argument's type (flags&0x3f at +0)"},
		{"flags elsewhere", sym2idDebian3411(), func() *Layout {
			l := table()
			l.Basic.Flags = 8
			return l
		}, "no check of the argument's type (flags&0x1f at +8)"},
		{"klass at 32", sym2idDebian312(), func() *Layout {
			l := table()
			l.Basic.Klass = 32
			return l
		}, "returns the 8-byte member at sym+32, inside RBasic (klass at 32)"},
		{"no RUBY_T_MASK", sym2idDebian338(), func() *Layout {
			l := table()
			delete(l.Constants, "RUBY_T_MASK")
			return l
		}, "the layout has no RBasic and RUBY_T_MASK"},
		{"not exported", &fixEnv{}, table, "rb_sym2id: not exported"},
		{"another function's code", sym2idEnv(debian338().funcs["rb_during_gc"].pc, debian338().funcs["rb_during_gc"].code, nil, nil),
			table, "rb_sym2id: no check of the argument's type"},
		{"a tail call it cannot follow", sym2idEnv(sym2idSource338Static().funcs[symbolIDFunc].pc,
			sym2idSource338Static().funcs[symbolIDFunc].code, nil, nil),
			table, "rb_sym2id: returns no member of the object after its type check against 0x14"},
		// mov 0x20(%rbx),%rbp made to read elsewhere.
		{"unaligned", patchHex(t, sym2idDebian338(), "488b6b20", "488b6b24"), table,
			"returns the 8-byte member at sym+36, not 8-byte aligned"},
		{"past the object", patchHex(t, sym2idDebian338(), "488b6b20", "488b6b40"), table,
			"returns the 8-byte member at sym+64, past a Symbol's 64 bytes"},
		{"klass", patchHex(t, sym2idDebian338(), "488b6b20", "488b6b08"), table,
			"returns the 8-byte member at sym+8, inside RBasic (klass at 8)"},
		// mov 0x20(%rbx),%rbp made a 32-bit load: nop; mov 0x20(%rbx),%ebp.
		{"a 4-byte member", patchHex(t, sym2idDebian338(), "488b6b20", "908b6b20"), table,
			"rb_sym2id: returns the 4-byte member at sym+32, not an 8-byte ID"},
		// the type check's jne made a jmp to the error: no path passes it.
		{"no path passes the check", patchHex(t, sym2idDebian338(), "4883f814759b", "4883f814eb9b"), table,
			"rb_sym2id: no check of the argument's type"},
	} {
		off, _, err := findSymbolID(c.env, c.l())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %d %v, want an error with %q", c.name, off, err, c.want)
		}
	}
}

// TestSymbolIDPaths: the path search is bounded, stops at calls that do not
// return, and does not follow one state twice.
func TestSymbolIDPaths(t *testing.T) {
	l := tableWithoutSymbolID(t, "3.3.8")
	// The type check (mov (%rdi),%rax; and $0x1f,%eax; cmp $0x14,%rax; je
	// over a ret), then 14 registers, each set or not by a branch (jne over
	// mov %rdi,%r): 2^14 states.
	check := "488b0783e01f4883f8147401c3"
	code := check
	for _, r := range []string{"4889f8", "4889f9", "4889fa", "4889fb", "4889fd", "4889fe", "4989f8", "4989f9",
		"4989fa", "4989fb", "4989fc", "4989fd", "4989fe", "4989ff"} {
		code += "7503" + r
	}
	code += "488b4720c3" // mov 0x20(%rdi),%rax; ret
	if _, _, err := findSymbolID(sym2idEnv(0x1000, code, nil, nil), l); err == nil ||
		!strings.Contains(err.Error(), "more paths than this decoder follows") {
		t.Errorf("2^14 states: %v", err)
	}
	// The same branch 200 times (je to the next instruction): one state at
	// each target.
	code = check + strings.Repeat("7400", 200) + "488b4720c3"
	if off, _, err := findSymbolID(sym2idEnv(0x1000, code, nil, nil), l); err != nil || off != 32 {
		t.Errorf("200 branches: %d %v", off, err)
	}
	// A loop after the check (jmp to itself): followed once.
	if _, _, err := findSymbolID(sym2idEnv(0x1000, check+"ebfe", nil, nil), l); err == nil ||
		!strings.Contains(err.Error(), "returns no member") {
		t.Errorf("a loop: %v", err)
	}
	// A conditional tail call (je rel32) into the rest, at 0x2000.
	env := sym2idEnv(0x1000, "488b0783e01f4883f8140f84f00f000031c0c3", map[uint64]string{0x2000: "488b4720c3"}, nil)
	if off, _, err := findSymbolID(env, l); err != nil || off != 32 {
		t.Errorf("a conditional tail call: %d %v", off, err)
	}
	named, err := tracePaths(sym2idDebian312(), symbolIDFunc, 0, 0x1f)
	if err != nil {
		t.Fatal(err)
	}
	env = sym2idDebian312()
	env.callees = nil
	unnamed, err := tracePaths(env, symbolIDFunc, 0, 0x1f)
	if err != nil {
		t.Fatal(err)
	}
	if named.steps >= unnamed.steps {
		t.Errorf("%d steps with rb_raise named, %d without: the code after it was followed", named.steps, unnamed.steps)
	}
	t.Logf("Debian 3.1.2: %d steps, %d states (%d without rb_raise named)", named.steps, named.states, unnamed.steps)
}

// TestSetSymbolID: the offset found completes a table layout and is listed
// with the anchors; a table's anchor says why it is missing.
func TestSetSymbolID(t *testing.T) {
	l := tableWithoutSymbolID(t, "3.3.8")
	off, how, err := findSymbolID(sym2idDebian338(), l)
	if err != nil {
		t.Fatal(err)
	}
	l.setSymbolID(off, how)
	if l.Symbol.ID != wantSymbolID || l.Symbol.IDHow != how {
		t.Errorf("layout %+v", l.Symbol)
	}
	a := symbolIDAnchor(l)
	const want = "offset 32, disassembly of rb_sym2id (8-byte load at sym+32 returned after the type check " +
		"flags&0x1f == 0x14, stored there when it assigns an ID)"
	if !a.Found || a.Name != "RSymbol.id" || a.How != want {
		t.Errorf("anchor %+v", a)
	}
	if a := symbolIDAnchor(tableWithoutSymbolID(t, "3.3.8")); a.Found || a.Why != "not in the layout" {
		t.Errorf("table anchor %+v", a)
	}
	l = tableWithoutSymbolID(t, "3.3.8")
	l.Symbol.IDWhy = "not in the layout; rb_sym2id: not exported"
	if a := symbolIDAnchor(l); a.Found || a.Why != l.Symbol.IDWhy {
		t.Errorf("anchor %+v", a)
	}
}

// TestSymbolIDRealRubies: every test Ruby's layout (what `rubyperf offsets`
// prints) has RSymbol.id; a table layout has it from rb_sym2id, and where the
// build has DWARF, or is a stripped copy of one that has, the disassembly
// gives DWARF's offset.
func TestSymbolIDRealRubies(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			b, l := openLayout(t, r.VM)
			a := b.Anchors(l)
			t.Logf("layout %s; %s: %s%s", l.Source, a.SymbolID.Name, a.SymbolID.How, a.SymbolID.Why)
			if l.Symbol.ID <= 0 || !a.SymbolID.Found {
				t.Fatalf("no RSymbol.id: %d, %s", l.Symbol.ID, a.SymbolID.Why)
			}
			dwarf := l
			if !l.FromDWARF() {
				// A table has the offset: the code must say the same.
				if off, how, err := findSymbolID(newELFEnv(b), l); err != nil || off != l.Symbol.ID {
					t.Errorf("table %d, disassembly %d (%s, %v)", l.Symbol.ID, off, how, err)
				}
				full, ok := testruby.Optional(strings.TrimSuffix(r.Name, "-stripped"))
				if !ok || !full.DWARF || full.Name == r.Name {
					return
				}
				_, dwarf = openLayout(t, full.VM)
			}
			if dwarf.Symbol.ID <= 0 {
				t.Fatalf("DWARF of %s has no RSymbol.id", dwarf.Source)
			}
			off, how, err := findSymbolID(newELFEnv(b), dwarf)
			if err != nil {
				t.Fatalf("disassembly with the DWARF layout of %s: %v", dwarf.Source, err)
			}
			if off != dwarf.Symbol.ID || l.Symbol.ID != dwarf.Symbol.ID {
				t.Errorf("disassembly %d (%s), layout %d, DWARF %d", off, how, l.Symbol.ID, dwarf.Symbol.ID)
			}
		})
	}
}
