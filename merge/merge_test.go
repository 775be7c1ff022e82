package merge

import (
	"strings"
	"testing"
)

func rb(name string, finish bool) Ruby {
	return Ruby{Frame: Frame{Kind: KindRuby, Name: name}, Finish: finish}
}
func cf(name string) Ruby    { return Ruby{Frame: Frame{Kind: KindCFunc, Name: name}} }
func nat(name string) Native { return Native{Frame: Frame{Kind: KindNative, Name: name}} }
func vm() Native             { return Native{Frame: Frame{Kind: KindNative, Name: "rb_vm_exec"}, VMEntry: true} }
func jit() Native            { return Native{Frame: Frame{Kind: KindNative, Name: "[unknown]"}, JIT: true} }

func names(fs []Frame) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return strings.Join(out, " ")
}

// The pure logic of Merge, next to the real-process golden tests in
// recording (TestMergedStacksGolden).
func TestMerge(t *testing.T) {
	// block in Foo#bar <- rb_yield <- rb_ary_each (Array#each) <- Foo#bar <- <main>
	rubies := []Ruby{rb("block in bar", true), cf("Array#each"), rb("Foo#bar", false), rb("<main>", true)}
	natives := []Native{nat("leaf"), vm(), nat("rb_yield"), nat("rb_ary_each"),
		{Frame: Frame{Kind: KindNative, Name: "vm_exec_core"}, Interp: true}, vm(), nat("main")}
	cases := []struct {
		name     string
		natives  []Native
		rubies   []Ruby
		opts     Options
		want     string
		fallback bool
	}{
		{"interleaved", natives, rubies, Options{},
			"leaf block in bar rb_yield rb_ary_each Array#each Foo#bar <main> main", false},
		{"interp kept", natives, rubies, Options{Interp: true},
			"leaf block in bar rb_vm_exec rb_yield rb_ary_each vm_exec_core Array#each Foo#bar <main> rb_vm_exec main", false},
		{"ruby only", natives, rubies, Options{NoNative: true}, "block in bar Array#each Foo#bar <main>", false},
		{"unwind stopped early", natives[:4], rubies, Options{},
			"leaf block in bar rb_yield rb_ary_each Array#each Foo#bar <main>", false},
		{"more VM entries than Ruby entries", append(natives, vm()), rubies, Options{},
			"block in bar Array#each Foo#bar <main> leaf rb_yield rb_ary_each main", true},
		// YJIT: JIT code of Foo#bar called Array#each's C function directly
		// (the cfunc frame is pushed by the JIT code), and the block runs in
		// the interpreter.
		{"JIT code calls a C method", []Native{nat("leaf"), vm(), nat("rb_yield"), nat("rb_ary_each"), jit(), vm(), nat("main")},
			rubies, Options{}, "leaf block in bar rb_yield rb_ary_each Array#each [JIT] Foo#bar Foo#bar <main> main", false},
		{"sampled in JIT code", []Native{jit(), {Frame: Frame{Name: "vm_exec_core"}, Interp: true}, vm(), nat("main")},
			[]Ruby{rb("Foo#bar", false), rb("<main>", true)}, Options{}, "[JIT] Foo#bar Foo#bar <main> main", false},
		{"JIT code calls a C helper", []Native{nat("rb_hash_aref"), jit(), vm()},
			[]Ruby{rb("Foo#bar", true)}, Options{}, "rb_hash_aref [JIT] Foo#bar Foo#bar", false},
		{"JIT frame of an unknown method", []Native{jit(), vm()},
			[]Ruby{rb("[unknown]", true)}, Options{}, "[JIT] [unknown]", false},
		{"unwinding stopped in JIT code", []Native{nat("rb_ary_each"), jit()},
			[]Ruby{cf("Array#each"), rb("Foo#bar", true)}, Options{}, "rb_ary_each Array#each [JIT] Foo#bar Foo#bar", false},
		{"leftover Ruby frames below the last entry when the thread start was reached",
			[]Native{nat("leaf"), vm(), {Frame: Frame{Name: "_start"}, ThreadStart: true}},
			[]Ruby{rb("<main>", true), rb("<main> placeholder", true)}, Options{},
			"leaf <main> <main> placeholder _start", false},
	}
	for _, c := range cases {
		got, fb := Merge(c.natives, c.rubies, c.opts)
		if names(got) != c.want || fb != c.fallback {
			t.Errorf("%s:\n got %q (fallback %v)\nwant %q (fallback %v)", c.name, names(got), fb, c.want, c.fallback)
		}
	}
	// One Merger reused across every case, twice over, gives the same
	// answers: nothing of one call leaks into the next.
	var m Merger
	for round := range 2 {
		for _, c := range cases {
			got, fb := m.Merge(c.natives, c.rubies, c.opts)
			if names(got) != c.want || fb != c.fallback {
				t.Errorf("reused Merger, round %d, %s:\n got %q (fallback %v)\nwant %q", round, c.name, names(got), fb, c.want)
			}
		}
	}
}
