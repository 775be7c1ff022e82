package merge

import (
	"strings"
	"testing"
)

func rb(name string, finish bool) Ruby {
	return Ruby{Frame: Frame{Kind: KindRuby, Name: name}, Finish: finish}
}
func cf(name string) Ruby { return Ruby{Frame: Frame{Kind: KindCFunc, Name: name}} }

// ext is a native frame outside the interpreter (a C extension, libc).
func ext(name string) Native { return Native{Frame: Frame{Kind: KindNative, Name: name}} }

// lib is a frame of libruby; "" is one no symbol names.
func lib(name string) Native {
	if name == "" {
		name = "[unknown]"
	}
	return Native{Frame: Frame{Kind: KindNative, Name: name}, Interpreter: true}
}
func plumbing(name string) Native {
	n := lib(name)
	n.Plumbing = true
	return n
}
func vm() Native {
	return Native{Frame: Frame{Kind: KindNative, Name: "rb_vm_exec"}, VMEntry: true, Interpreter: true}
}
func jit() Native    { return Native{Frame: Frame{Kind: KindNative, Name: "[unknown]"}, JIT: true} }
func start() Native  { return Native{Frame: Frame{Kind: KindNative, Name: "_start"}, ThreadStart: true} }
func kernel() Native { return Native{Frame: Frame{Kind: KindKernel, Name: "do_syscall_64"}} }

func names(fs []Frame) string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return strings.Join(out, " ")
}

var (
	ruby   = Options{View: ViewRuby}
	native = Options{View: ViewNative}
)

// The pure logic of Merge, next to the real-process tests: the golden
// stacks of recording (TestMergedStacksGolden) and the views of Debian's
// stripped Ruby in cmd/rubyperf (TestViewsOfStrippedRuby).
func TestMerge(t *testing.T) {
	// block in Foo#bar <- rb_yield <- rb_ary_each (Array#each) <- Foo#bar <- <main>
	rubies := []Ruby{rb("block in bar", true), cf("Array#each"), rb("Foo#bar", false), rb("<main>", true)}
	natives := []Native{ext("leaf"), vm(), lib("rb_yield"), lib(""), lib("rb_ary_each"),
		plumbing("vm_exec_core"), vm(), lib("ruby_run_node"), ext("main"), start()}
	const incomplete = " " + IncompleteName
	cases := []struct {
		name    string
		natives []Native
		rubies  []Ruby
		opts    Options
		want    string
		how     Outcome
	}{
		{"default: the interpreter between Ruby frames and below them folded", natives, rubies, ruby,
			"leaf block in bar Array#each Foo#bar <main>", Outcome{}},
		{"every native frame", natives, rubies, native,
			"leaf block in bar rb_vm_exec rb_yield [unknown] rb_ary_each vm_exec_core Array#each Foo#bar <main> rb_vm_exec ruby_run_node main _start", Outcome{}},
		{"ruby only", natives, rubies, Options{View: ViewRubyOnly}, "block in bar Array#each Foo#bar <main>", Outcome{}},
		{"a C extension between Ruby frames stays",
			[]Native{ext("leaf"), vm(), lib("rb_yield"), ext("ext_each_pair"), lib(""), vm(), start()}, rubies, ruby,
			"leaf block in bar ext_each_pair Array#each Foo#bar <main>", Outcome{}},
		{"a C method's own native frames stay, unnamed interpreter frames fold",
			[]Native{lib("rb_ary_sort_bang"), lib(""), plumbing("vm_call_cfunc_with_frame"), vm(), start()},
			[]Ruby{cf("Array#sort!"), rb("Foo#bar", false), rb("<main>", true)}, ruby,
			"rb_ary_sort_bang Array#sort! Foo#bar <main>", Outcome{}},
		{"what a Ruby method's instructions call stays",
			[]Native{kernel(), ext("malloc"), lib("rb_str_plus"), lib(""), vm(), start()},
			[]Ruby{rb("Foo#bar", false), rb("<main>", true)}, ruby,
			"do_syscall_64 malloc rb_str_plus Foo#bar <main>", Outcome{}},
		{"unwind stopped early", natives[:4], rubies, ruby,
			"leaf block in bar Array#each Foo#bar <main>" + incomplete, Outcome{Incomplete: true}},
		{"unwind stopped early, every native frame", natives[:4], rubies, native,
			"leaf block in bar rb_vm_exec rb_yield [unknown] Array#each Foo#bar <main>" + incomplete, Outcome{Incomplete: true}},
		{"unwind stopped early, ruby only", natives[:4], rubies, Options{View: ViewRubyOnly},
			"block in bar Array#each Foo#bar <main>", Outcome{}},
		{"every entry reached, not the thread's start: nothing the default view shows is missing",
			natives[:9], rubies, ruby, "leaf block in bar Array#each Foo#bar <main>", Outcome{}},
		{"every entry reached, not the thread's start, every native frame", natives[:9], rubies, native,
			"leaf block in bar rb_vm_exec rb_yield [unknown] rb_ary_each vm_exec_core Array#each Foo#bar <main> rb_vm_exec ruby_run_node main" + incomplete,
			Outcome{Incomplete: true}},
		{"no stack copy: kernel frames on the Ruby stack", []Native{kernel()}, rubies, ruby,
			"do_syscall_64 block in bar Array#each Foo#bar <main>", Outcome{}},
		{"a thread without Ruby frames", []Native{ext("poll"), lib(""), lib("timer_thread_func")}, nil, ruby,
			"poll timer_thread_func" + incomplete, Outcome{Incomplete: true}},
		{"a thread without Ruby frames, unwound to its start", []Native{ext("poll"), lib("timer_thread_func"), start()}, nil, ruby,
			"poll timer_thread_func _start", Outcome{}},
		{"more VM entries than Ruby entries", append([]Native{vm()}, natives...), rubies, ruby,
			"block in bar Array#each Foo#bar <main> leaf rb_yield rb_ary_each ruby_run_node main _start", Outcome{Fallback: true}},
		{"more VM entries than Ruby entries, short of the thread's start",
			append([]Native{vm(), vm()}, natives[:3]...), rubies, ruby,
			"block in bar Array#each Foo#bar <main> leaf rb_yield" + incomplete, Outcome{Fallback: true, Incomplete: true}},
		{"no Ruby stack read, the native one folded and short: not an empty stack",
			[]Native{lib(""), plumbing("vm_exec_core"), vm(), lib("")}, nil, ruby,
			IncompleteName, Outcome{Fallback: true, Incomplete: true}},
		{"neither native nor Ruby frames: not an empty stack", nil, nil, ruby,
			IncompleteName, Outcome{Incomplete: true}},
		// YJIT: JIT code of Foo#bar called Array#each's C function directly
		// (the cfunc frame is pushed by the JIT code), and the block runs in
		// the interpreter.
		{"JIT code calls a C method", []Native{ext("leaf"), vm(), lib("rb_yield"), lib("rb_ary_each"), jit(), vm(), start()},
			rubies, ruby, "leaf block in bar Array#each [JIT] Foo#bar Foo#bar <main>", Outcome{}},
		{"JIT code calls a C method, every native frame", []Native{ext("leaf"), vm(), lib("rb_yield"), lib("rb_ary_each"), jit(), vm(), start()},
			rubies, native, "leaf block in bar rb_vm_exec rb_yield rb_ary_each Array#each [JIT] Foo#bar Foo#bar <main> rb_vm_exec _start", Outcome{}},
		{"sampled in JIT code", []Native{jit(), plumbing("vm_exec_core"), vm(), start()},
			[]Ruby{rb("Foo#bar", false), rb("<main>", true)}, ruby, "[JIT] Foo#bar Foo#bar <main>", Outcome{}},
		{"JIT code calls a C helper", []Native{lib("rb_hash_aref"), jit(), vm(), start()},
			[]Ruby{rb("Foo#bar", true)}, ruby, "rb_hash_aref [JIT] Foo#bar Foo#bar", Outcome{}},
		{"JIT frame of an unknown method", []Native{jit(), vm(), start()},
			[]Ruby{rb("[unknown]", true)}, ruby, "[JIT] [unknown]", Outcome{}},
		{"unwinding stopped in JIT code", []Native{lib("rb_ary_each"), jit()},
			[]Ruby{cf("Array#each"), rb("Foo#bar", true)}, ruby, "rb_ary_each Array#each [JIT] Foo#bar Foo#bar" + incomplete,
			Outcome{Incomplete: true}},
		{"leftover Ruby frames below the last entry when the thread start was reached",
			[]Native{ext("leaf"), vm(), start()},
			[]Ruby{rb("<main>", true), rb("<main> placeholder", true)}, native,
			"leaf <main> <main> placeholder rb_vm_exec _start", Outcome{}},
		{"leftover Ruby frames, default view", []Native{ext("leaf"), vm(), start()},
			[]Ruby{rb("<main>", true), rb("<main> placeholder", true)}, ruby, "leaf <main> <main> placeholder", Outcome{}},
	}
	for _, c := range cases {
		got, how := Merge(c.natives, c.rubies, c.opts)
		if names(got) != c.want || how != c.how {
			t.Errorf("%s:\n got %q (%+v)\nwant %q (%+v)", c.name, names(got), how, c.want, c.how)
		}
	}
	// One Merger reused across every case, twice over, gives the same
	// answers: nothing of one call leaks into the next.
	var m Merger
	for round := range 2 {
		for _, c := range cases {
			got, how := m.Merge(c.natives, c.rubies, c.opts)
			if names(got) != c.want || how != c.how {
				t.Errorf("reused Merger, round %d, %s:\n got %q (%+v)\nwant %q", round, c.name, names(got), how, c.want)
			}
		}
	}
}
