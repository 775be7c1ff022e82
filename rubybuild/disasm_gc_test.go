package rubybuild

import (
	"maps"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// builtinTable is the built-in table of version (x86_64) without
// flags.during_gc, as a table generated before it was read had it (the
// fallback fills it in from rb_during_gc).
func builtinTable(t testing.TB, version string) *Layout {
	t.Helper()
	l := tableWithout(t, version, "rb_objspace", "flags.during_gc")
	if l.GC.Running.BitSize != 0 || l.Capabilities.GCPhase || !l.Capabilities.GCStamps {
		t.Fatalf("table %s: during_gc %+v, GC phase %v, stamps %v: want a table with stamps and no during_gc",
			version, l.GC.Running, l.Capabilities.GCPhase, l.Capabilities.GCStamps)
	}
	return l
}

// tableWithout is the built-in table of version (x86_64) with the member
// of strct taken out, resolved again: what the disassembly fallbacks
// complete.
func tableWithout(t testing.TB, version, strct, member string) *Layout {
	t.Helper()
	full, err := BuiltinLayout(version, "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	structs := maps.Clone(full.Structs)
	sl := structs[strct]
	sl.Members = maps.Clone(sl.Members)
	delete(sl.Members, member)
	structs[strct] = sl
	l, err := resolveLayout(full.Version, full.Arch, full.Source, structs, full.Constants)
	if err != nil {
		t.Fatalf("table %s without %s.%s: %v", version, strct, member, err)
	}
	return l
}

// wantDuringGC is where DWARF puts flags.during_gc in every 3.1-4.0 build:
// in the word of flags.mode, after mode (2 bits), immediate_sweep, dont_gc
// and dont_incremental (gc.c, gc/default/default.c), as the DWARF of our
// 3.1.2, 3.3.8 and 3.4.5 source builds says (bit 5). The fixture tests check
// the code gives this; TestDuringGCRealRubies checks it against DWARF itself.
func wantDuringGC(l *Layout) Member {
	m := l.GC.Mode
	return Member{Offset: m.Offset, Size: m.Size, BitOffset: m.BitOffset + m.BitSize + 3, BitSize: 1}
}

// Ruby built from Debian's sources here (gcc 12, Ruby's own -O3): the source
// builds of internal/testruby, whose DWARF says flags.during_gc is bit 5 of
// objspace+16 (3.1, 3.3) or +20 (3.4).
func source312Shared() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_during_gc": {0xf1380, "488b0509293300488b00488b80500400000fb64010c0e80583e001c3"},
		},
		slots: map[uint64]slot{
			0x423c90: {kind: slotAddr, value: 0x435090, ok: true}, // GLOB_DAT ruby_current_vm_ptr
		},
		data: [2]uint64{0x426d40, 0x439000},
	}
}

// A static, non-PIC ruby: the variable's value read directly.
func source338Static() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_during_gc": {0x73270, "488b05f1a057004885c07414488b80180500000fb64010c0e80583e001c3669031c0c3"},
		},
		data: [2]uint64{0x5e7880, 0x5fd9d0},
	}
}

// Ruby 3.4.5 --enable-shared (-fPIC, no CET): lea of the variable, then its
// value; DWARF says bit 5 of objspace+20.
func source345Shared() *fixEnv {
	return &fixEnv{
		funcs: map[string]fixFunc{
			"rb_during_gc": {0x14fea0, "488d0549355400488b004885c07419488b80100500000fb64014c0e80583e001c30f1f800000000031c0c3"},
		},
		data: [2]uint64{0x681c40, 0x698000},
	}
}

// duringGCShapes are testdata/during_gc.c compiled the ways its comment says,
// by name; the variable is at 0x4010 in every one.
func duringGCShapes() map[string]*fixEnv {
	one := func(pc uint64, code string, local map[uint64]string) *fixEnv {
		return &fixEnv{funcs: map[string]fixFunc{duringGCFunc: {pc, code}}, local: local, data: [2]uint64{0x4000, 0x4018}}
	}
	return map[string]*fixEnv{
		// xor %eax,%eax before the NULL check, one shared ret
		"gcc -O2": one(0x1100, "f30f1efa488b15052f000031c04885d27411488b82180500000fb64010c0e80583e001c3", nil),
		// mov 0x10(%rax),%al: a byte load into the pointer's register
		"gcc -Os": one(0x10f9, "f30f1efa488b150c2f000031c04885d27410488b82180500008a4010c0e80583e001c3", nil),
		// mov 0x10(%rax),%eax; shr $5,%eax: the whole 32-bit word
		"clang -O2": one(0x1100, "f30f1efa488b05052f00004885c07411488b80180500008b4010c1e80583e001c331c0c3", nil),
		// vm->objspace in %rdi, a tail call to the GC's function
		"gcc -O2 out of line": one(0x1110, "f30f1efa488b05f52e0000488bb818050000ebdc",
			map[uint64]string{0x1100: "0fb64710c0e80583e001c3"}),
		"clang -O2 out of line": one(0x1100, "f30f1efa488b05052f0000488bb818050000eb0c",
			map[uint64]string{0x1120: "8b4710c1e80583e001c3"}),
		// call rb_gc_impl_during_gc_p: its result is not followed
		"clang -O1 out of line": one(0x1100, "f30f1efa50488b05042f0000488bb818050000e80800000059c3",
			map[uint64]string{0x1120: "8b4710c1e80583e001c3"}),
	}
}

// TestDisassemblyFixturesDuringGC: every build's rb_during_gc in the fixtures
// gives flags.during_gc in the word its table says holds flags.mode.
func TestDisassemblyFixturesDuringGC(t *testing.T) {
	for _, c := range []struct {
		name  string
		env   *fixEnv
		table string // the table the build gets (the nearest for 3.3.14 and 3.4.11)
	}{
		{"Debian 3.1.2", debian312(), "3.1.2"},
		{"Debian 3.1.7+really3.1.2", debian312Security(), "3.1.2"},
		{"Debian 3.3.8", debian338(), "3.3.8"},
		{"Debian 3.3.14", debian3314(), "3.3.11"},
		{"Debian 3.4.11", debian3411(), "3.4.9"},
		{"source 3.1.2 shared", source312Shared(), "3.1.2"},
		{"source 3.3.8 static", source338Static(), "3.3.8"},
		{"source 3.4.5 shared", source345Shared(), "3.4.5"},
	} {
		l := builtinTable(t, c.table)
		m, how, err := findDuringGC(c.env, l)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if want := wantDuringGC(l); m != want {
			t.Errorf("%s: %+v (%s), want %+v", c.name, m, how, want)
		}
		if !strings.HasPrefix(how, "disassembly of rb_during_gc (1-byte load at objspace+") {
			t.Errorf("%s: how %q", c.name, how)
		}
		t.Logf("%s: bit %d of objspace+%d: %s", c.name, m.BitOffset, m.Offset, how)
	}
}

// TestDisassemblyFixturesDuringGCShapes: the shapes gcc and clang give the
// function read the same; a call is not followed, so not found.
func TestDisassemblyFixturesDuringGCShapes(t *testing.T) {
	l := builtinTable(t, "3.3.8")
	for name, env := range duringGCShapes() {
		m, how, err := findDuringGC(env, l)
		if strings.HasSuffix(name, "-O1 out of line") {
			if err == nil || !strings.Contains(err.Error(), "cannot follow") {
				t.Errorf("%s: %+v %v, want not found", name, m, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if want := wantDuringGC(l); m != want {
			t.Errorf("%s: %+v (%s), want %+v", name, m, how, want)
		}
	}
}

// TestDisassemblyFixturesDuringGCRefused: a layout that does not fit the code
// gives not found, naming what the code reads.
func TestDisassemblyFixturesDuringGCRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		env  *fixEnv
		l    func() *Layout
		want string
	}{
		{"3.3's objspace offset on 3.4", debian3411(), func() *Layout { return builtinTable(t, "3.3.8") },
			"returns bit 5 of the 1-byte word at +20 of *(*0x4ecab0+1296), not through vm->objspace at 1304"},
		{"3.4's objspace offset on 3.3", debian338(), func() *Layout { return builtinTable(t, "3.4.9") },
			"not through vm->objspace at 1296"},
		{"flags in another word", debian338(), func() *Layout {
			l := builtinTable(t, "3.3.8")
			l.GC.Mode.Offset, l.GC.Compacting.Offset = 20, 20
			return l
		}, "outside the 32-bit flags word at objspace+20"},
		{"a mode bit", debian338(), func() *Layout {
			l := builtinTable(t, "3.3.8")
			l.GC.Mode.BitOffset = 4
			return l
		}, "a bit of flags.mode"},
		{"the compacting bit", debian338(), func() *Layout {
			l := builtinTable(t, "3.3.8")
			l.GC.Compacting.BitOffset = 5
			return l
		}, "the bit of flags.during_compacting"},
		{"no flags.mode", debian338(), func() *Layout {
			l := builtinTable(t, "3.3.8")
			l.GC.Mode = Member{Offset: -1}
			return l
		}, "the layout has no vm->objspace and flags.mode"},
		{"a global outside the data", func() *fixEnv { e := debian338(); e.data = [2]uint64{}; return e }(),
			func() *Layout { return builtinTable(t, "3.3.8") }, "0x46bbe8 is not in a data section"},
		{"not exported", &fixEnv{}, func() *Layout { return builtinTable(t, "3.3.8") }, "rb_during_gc: not exported"},
		{"another function's code", &fixEnv{funcs: map[string]fixFunc{duringGCFunc: debian338().funcs["rb_thread_current"]}},
			func() *Layout { return builtinTable(t, "3.3.8") }, "rb_during_gc: returns a value this decoder cannot follow"},
	} {
		m, _, err := findDuringGC(c.env, c.l())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v %v, want an error with %q", c.name, m, err, c.want)
		}
	}
}

// TestSetGCRunning: the bit found completes the GC phase of a table layout,
// in its own copy of the structs, and is listed with the anchors.
func TestSetGCRunning(t *testing.T) {
	l := builtinTable(t, "3.3.8")
	m, how, err := findDuringGC(debian338(), l)
	if err != nil {
		t.Fatal(err)
	}
	l.setGCRunning(m, how)
	if !l.Capabilities.GCPhase || l.GC.Running != m {
		t.Errorf("GC phase %v, running %+v", l.Capabilities.GCPhase, l.GC.Running)
	}
	if got := l.Structs["rb_objspace"].Members["flags.during_gc"]; got != m {
		t.Errorf("rb_objspace.flags.during_gc = %+v, want %+v", got, m)
	}
	if _, ok := builtinTable(t, "3.3.8").Structs["rb_objspace"].Members["flags.during_gc"]; ok {
		t.Error("the built-in table was changed")
	}
	a := gcRunningAnchor(l)
	const want = "bit 5 of objspace+16, disassembly of rb_during_gc " +
		"(1-byte load at objspace+16 through global 0x46bbe8, vm->objspace at 1304)"
	if !a.Found || a.How != want {
		t.Errorf("anchor %+v", a)
	}
	if a := gcRunningAnchor(builtinTable(t, "3.3.8")); a.Found || a.Why != "not in the layout" {
		t.Errorf("table anchor %+v", a)
	}
}

// TestDuringGCRealRubies: every test Ruby's layout (what `rubyperf offsets`
// prints) has a GC phase; where the build has DWARF, or is a stripped copy
// of one that has, the disassembly of rb_during_gc gives DWARF's during_gc.
func TestDuringGCRealRubies(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			b, l := openLayout(t, r.VM)
			a := b.Anchors(l)
			t.Logf("layout %s; %s: %s%s", l.Source, a.GCRunning.Name, a.GCRunning.How, a.GCRunning.Why)
			if !l.Capabilities.GCPhase || !a.GCRunning.Found {
				t.Fatalf("no GC phase: during_gc %+v, %s", l.GC.Running, a.GCRunning.Why)
			}
			dwarf := l
			if !l.FromDWARF() {
				// A table has the bit: the code must say the same.
				if m, how, err := findDuringGC(newELFEnv(b), l); err != nil || m != l.GC.Running {
					t.Errorf("table %+v, disassembly %+v (%s, %v)", l.GC.Running, m, how, err)
				}
				full, ok := testruby.Optional(strings.TrimSuffix(r.Name, "-stripped"))
				if !ok || !full.DWARF || full.Name == r.Name {
					return
				}
				_, dwarf = openLayout(t, full.VM)
			}
			m, how, err := findDuringGC(newELFEnv(b), dwarf)
			if err != nil {
				t.Fatalf("disassembly with the DWARF layout of %s: %v", dwarf.Source, err)
			}
			if m != dwarf.GC.Running || l.GC.Running != dwarf.GC.Running {
				t.Errorf("disassembly %+v (%s), layout %+v, DWARF %+v", m, how, l.GC.Running, dwarf.GC.Running)
			}
		})
	}
}
