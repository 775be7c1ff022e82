package export

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, rewriting it under -update. On
// a mismatch it leaves got in a temporary file to diff against.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		tmp := filepath.Join(t.TempDir(), name)
		os.WriteFile(tmp, got, 0o644)
		t.Errorf("output differs from %s (%d bytes, want %d); got is in %s; run go test -update if intended",
			path, len(got), len(want), tmp)
	}
}

// Object files of the test process, laid out as in a real x86_64 process.
var (
	exeRuby = mapping{"/usr/bin/ruby3.3", 0x55d0c0a00000, 0x55d0c0a01000, 0x1000, "4b2e8f0c1d9a7e6f5a4b3c2d1e0f9a8b7c6d5e4f"}
	libRuby = mapping{"/usr/lib/x86_64-linux-gnu/libruby-3.3.so.3.3.8", 0x7f3a1c271000, 0x7f3a1c5a0000, 0x71000, "9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b"}
	libC    = mapping{"/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f3a1bc28000, 0x7f3a1bdbd000, 0x28000, "c047672cae7964324658491e7dee26748ae5d2f8"}
	libJSON = mapping{"/var/lib/gems/3.3.0/gems/json-2.7.2/lib/json/ext/generator.so", 0x7f3a1b901000, 0x7f3a1b90a000, 0x1000, ""}
)

type mapping struct {
	file                 string
	start, limit, offset uint64
	buildID              string
}

// native is a native frame at symbol+off in m.
func native(name string, m mapping, sym, off uint64) merge.Frame {
	return merge.Frame{Kind: merge.KindNative, Name: name, File: m.file, Addr: m.start + sym + off, SymOffset: off,
		MapStart: m.start, MapLimit: m.limit, MapOffset: m.offset, BuildID: m.buildID}
}

func kernel(name string, addr, off uint64) merge.Frame {
	return merge.Frame{Kind: merge.KindKernel, Name: name, File: "[kernel.kallsyms]", Addr: addr, SymOffset: off}
}

func ruby(name, file string, line int64) merge.Frame {
	return merge.Frame{Kind: merge.KindRuby, Name: name, File: file, Line: line}
}

func cfunc(name, file string, line int64) merge.Frame {
	return merge.Frame{Kind: merge.KindCFunc, Name: name, File: file, Line: line}
}

// rootFirst builds a leaf-first frame list from frames given root first,
// which reads like the program.
func rootFirst(frames ...merge.Frame) []merge.Frame {
	out := make([]merge.Frame, len(frames))
	for i, f := range frames {
		out[len(frames)-1-i] = f
	}
	return out
}

func join(parts ...[]merge.Frame) []merge.Frame {
	var out []merge.Frame
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

const (
	testPeriod = 10_101_010 // ns: 99 Hz
	benchRB    = "/app/bench.rb"
	fooRB      = "/app/lib/foo.rb"
	workerRB   = "/app/lib/worker.rb"
	rakeRB     = "/usr/lib/ruby/vendor_ruby/rake/application.rb"
)

// testStacks is a small, realistic profile: a Ruby script's main thread
// and a worker thread (pid 4242), and a rake process (pid 5151), with
// Ruby, C-method, native and kernel frames, one stack the merger could not
// interleave (Fallback), and names that need escaping in every format.
func testStacks() []merge.Stack {
	// Native frames from the process entry to the VM, root first.
	entry := []merge.Frame{
		native("_start", exeRuby, 0x120, 0x25),
		native("__libc_start_main", libC, 0x271c0, 0x85),
		native("main", exeRuby, 0x60, 0x4a),
		native("ruby_run_node", libRuby, 0x8e320, 0x3d),
		native("rb_ec_exec_node", libRuby, 0x8e110, 0xa3),
	}
	mainRuby := []merge.Frame{
		ruby("<main>", benchRB, 12),
		cfunc("Integer#times", benchRB, 12),
		native("rb_int_times", libRuby, 0x1c8a40, 0x6e),
		native("rb_yield", libRuby, 0x2f0b10, 0x51),
		ruby("block in <main>", benchRB, 13),
	}
	fooBar := func(line int64) merge.Frame { return ruby("Foo#bar", fooRB, line) }
	workerEntry := []merge.Frame{
		native("clone3", libC, 0x1007b0, 0x2c),
		native("start_thread", libC, 0x89030, 0x2f7),
		native("thread_start_func_2", libRuby, 0x2b8710, 0x1c4),
		ruby("block in <main>", benchRB, 20),
		ruby("Worker#run", workerRB, 5),
		cfunc("Kernel#loop", workerRB, 6),
		native("rb_f_loop", libRuby, 0x2f92a0, 0x3a),
		ruby("block in Worker#run", workerRB, 7),
	}
	syscallWrite := []merge.Frame{
		kernel("entry_SYSCALL_64_after_hwframe", 0xffffffff82000000, 0x76),
		kernel("do_syscall_64", 0xffffffff81f1b2e0, 0x5d),
		kernel("ksys_write", 0xffffffff8143c8a0, 0x6f),
		kernel("vfs_write", 0xffffffff8143c1a0, 0x10a),
		kernel("pipe_write", 0xffffffff8144e6b0, 0x1f3),
	}
	syscallRead := []merge.Frame{
		kernel("entry_SYSCALL_64_after_hwframe", 0xffffffff82000000, 0x76),
		kernel("do_syscall_64", 0xffffffff81f1b2e0, 0x5d),
		kernel("ksys_read", 0xffffffff8143c6c0, 0x73),
		kernel("vfs_read", 0xffffffff8143b900, 0x9e),
		kernel("ext4_file_read_iter", 0xffffffff815f0a20, 0x42),
		kernel("copy_page_to_iter", 0xffffffff81745c10, 0x181),
	}

	type spec struct {
		pid, tid int
		comm     string
		n        int // samples of this stack
		frames   []merge.Frame
		fallback bool
	}
	specs := []spec{
		// Main thread: Foo#bar iterating an array.
		{4242, 4242, "ruby", 3, join(entry, mainRuby, []merge.Frame{fooBar(9), cfunc("Array#each", fooRB, 9),
			native("rb_ary_each", libRuby, 0x6a4e0, 0x5b), native("rb_yield", libRuby, 0x2f0b10, 0x51),
			ruby("block in Foo#bar", fooRB, 10)}), false},
		{4242, 4242, "ruby", 2, join(entry, mainRuby, []merge.Frame{fooBar(9), cfunc("Array#each", fooRB, 9),
			native("rb_ary_each", libRuby, 0x6a4e0, 0x3e)}), false},
		// String#* copying memory in libc.
		{4242, 4242, "ruby", 2, join(entry, mainRuby, []merge.Frame{fooBar(12), cfunc("String#*", fooRB, 12),
			native("rb_str_times", libRuby, 0x25f9c0, 0x14c), native("__memmove_avx_unaligned_erms", libC, 0x1a0c40, 0x3a)}), false},
		// IO#write down to the kernel.
		{4242, 4242, "ruby", 1, join(entry, mainRuby, []merge.Frame{fooBar(13), cfunc("IO#write", fooRB, 13),
			native("rb_io_write", libRuby, 0xf7a50, 0x2d), native("io_binwrite", libRuby, 0xf4c30, 0x1b2),
			native("__GI___libc_write", libC, 0x114870, 0x17)}, syscallWrite), false},
		// A method with markup and ';' in its name (define_method allows
		// anything), and the spaceship operator.
		{4242, 4242, "ruby", 1, join(entry, mainRuby, []merge.Frame{fooBar(14), ruby("Foo#<=>", fooRB, 18),
			ruby(`Foo#"a;b&c" 42`, fooRB, 22)}), false},
		// The worker thread, renamed by Thread#name=.
		{4242, 4243, "worker pool", 2, join(workerEntry, []merge.Frame{
			cfunc("JSON::Ext::Generator::State#generate", workerRB, 8),
			native("cState_generate", libJSON, 0x5a20, 0x61), native("generate_json_object", libJSON, 0x3f10, 0x1e2),
			native("[unknown]", libRuby, 0x3a0000, 0)}), false},
		// A stack the merger could not interleave: Ruby on top of native.
		{4242, 4243, "worker pool", 1, join(workerEntry[:3], []merge.Frame{native("vm_exec_core", libRuby, 0x2c4f00, 0x9a1),
			ruby("block in <main>", benchRB, 20), ruby("Worker#run", workerRB, 5)}), true},
		// rake, reading files in the kernel.
		{5151, 5151, "rake", 2, join(entry, []merge.Frame{
			ruby("<main>", "/usr/bin/rake", 27), ruby("Rake::Application#run", rakeRB, 80),
			ruby("Rake::Application#load_rakefile", rakeRB, 105), cfunc("Kernel#load", rakeRB, 110),
			native("rb_f_load", libRuby, 0x11d6f0, 0x3b), native("rb_load_internal", libRuby, 0x11d200, 0x9c),
			native("__GI___libc_read", libC, 0x1147d0, 0x17)}, syscallRead), false},
		{5151, 5151, "rake", 1, join(entry, []merge.Frame{
			ruby("<main>", "/usr/bin/rake", 27), ruby("Rake::Application#run", rakeRB, 80),
			ruby("Rake::Application#top_level", rakeRB, 131), ruby("Rake::Task#invoke", "/usr/lib/ruby/vendor_ruby/rake/task.rb", 188)}), false},
	}

	var stacks []merge.Stack
	time := uint64(1234_500_000_000)
	cpu := uint32(0)
	for _, sp := range specs {
		for range sp.n {
			time += testPeriod
			cpu = (cpu + 1) % 4
			stacks = append(stacks, merge.Stack{PID: sp.pid, TID: sp.tid, Comm: sp.comm, Time: time, CPU: cpu,
				Period: testPeriod, Frames: rootFirst(sp.frames...), Fallback: sp.fallback})
		}
	}
	return stacks
}

// bigStacks generates n samples of a synthetic program of 300 methods
// of every kind, from a fixed seed: each method calls three others, the
// first most often, and stacks are 8 to 60 frames deep, so that samples
// share prefixes as in a real program.
func bigStacks(n int) []merge.Stack {
	rng := rand.New(rand.NewPCG(1, 2))
	const methods = 300
	frames := make([]merge.Frame, methods)
	for i := range frames {
		switch i % 10 {
		case 0, 1, 2, 3, 4:
			frames[i] = ruby(fmt.Sprintf("App::Class%d#method_%d", i/10, i), fmt.Sprintf("/app/lib/class%d.rb", i/10), int64(i))
		case 5, 6:
			frames[i] = cfunc(fmt.Sprintf("Array#op_%d", i), "/app/lib/x.rb", int64(i))
		case 7, 8:
			frames[i] = native(fmt.Sprintf("rb_native_%d", i), libRuby, uint64(i)*0x100, 0x10)
		default:
			frames[i] = kernel(fmt.Sprintf("kernel_fn_%d", i), 0xffffffff81000000+uint64(i)*0x100, 0x8)
		}
	}
	stacks := make([]merge.Stack, n)
	for i := range stacks {
		fs := []merge.Frame{frames[0]}
		for m := 0; len(fs) < 60 && (len(fs) < 8 || rng.Float64() > 0.1); {
			k := 0 // which of m's three callees: 60%, 30%, 10%
			if p := rng.Float64(); p > 0.9 {
				k = 2
			} else if p > 0.6 {
				k = 1
			}
			m = (m*7 + k*13 + 1) % methods
			fs = append(fs, frames[m])
		}
		slices.Reverse(fs) // leaf first
		tid := 100 + rng.IntN(4)
		stacks[i] = merge.Stack{PID: 100, TID: tid, Comm: fmt.Sprintf("t%d", tid), Time: uint64(1e12) + uint64(i)*testPeriod,
			Period: testPeriod, Frames: fs}
	}
	return stacks
}
