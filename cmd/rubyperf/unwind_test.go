package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/readback"
)

// TestRecordDeepNativeStacks records, on every test Ruby and with record's
// default settings, a workload shaped like a real application: 60 Ruby
// levels, each re-entering the interpreter natively through a block passed
// to a C method, send, define_method or instance_exec, with a leaf that
// allocates. Its native stack is 200 to 360 frames and tens of KiB deep,
// which a stack copy of the default 8 KiB cuts on nearly every sample; the
// program's walk over the unwind tables reaches the thread's first frame:
// at most 0.5% of samples may hang under [native unwind incomplete] (but
// for the first samples, taken before the command's tables were ready). The
// same recording with --unwind copy shows what the tables spare. (On the
// musl Ruby, samples stopping in musl's libc, which has no unwind tables,
// are counted apart and logged: TestRecordMuslDebugFile covers a musl with
// its unwind tables in a debug file.)
func TestRecordDeepNativeStacks(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	script, _ := filepath.Abs("../../testdata/ruby/nativedeep.rb")
	// inMusl counts the incomplete samples whose native stack stops in
	// musl's libc, which is built without unwind tables (docs/rubies.md).
	inMusl := 0
	incomplete := func(t *testing.T, file string) (samples, incomplete, tables, deepest int) {
		inMusl = 0
		stats, err := readback.ReadStacks(file, readback.ReadOptions{Merge: merge.Options{View: merge.ViewRuby}}, func(s merge.Stack) error {
			ruby := 0
			outermost := "" // object of the outermost native frame unwound
			for _, f := range s.Frames {
				switch {
				case f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc:
					ruby++
				case f.Kind == merge.KindNative && f.Name != merge.IncompleteName:
					outermost = f.File
				}
			}
			deepest = max(deepest, ruby)
			if s.Incomplete && strings.Contains(outermost, "musl") {
				inMusl++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return stats.Samples, stats.Incomplete, stats.TableUnwound, deepest
	}
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "rubyperf.data")
			sum := record(t, "-F", "999", "-o", file, "--", r.Exe, script, "2")
			n, inc, tables, deepest := incomplete(t, file)
			t.Logf("%d samples (%d in the summary), %d unwound with the tables, %d incomplete (%d stopping in musl's libc); %d Ruby frames at the deepest",
				n, sum.samples, tables, inc, inMusl, deepest)
			if r.Libc != "musl" && inMusl > 0 {
				t.Errorf("%d samples of a %s Ruby stop in musl", inMusl, r.Libc)
			}
			inc -= inMusl
			if n < 1000 {
				t.Fatalf("only %d samples", n)
			}
			if deepest < 100 {
				t.Errorf("at most %d Ruby frames in a stack: the workload is not as deep as meant", deepest)
			}
			// The first samples of a command may come before its tables
			// (the recorder waits for them at most 50 ms: on a loaded
			// machine the compile takes longer); they are unwound from the
			// copy, which this workload is too deep for.
			if float64(tables) < 0.98*float64(n) {
				t.Errorf("%d of %d samples unwound with the tables", tables, n)
			}
			if float64(inc) > 0.005*float64(n)+float64(n-tables) {
				t.Errorf("%d of %d samples under [native unwind incomplete], %d of them unwound without the tables (want <= 0.5%% of all, besides those)", inc, n, n-tables)
			}
			// At default settings a deep sample costs its file under 1 KiB:
			// no stack copy, and the frames written as references into the
			// file's frame trees.
			if per := sampleBytes(t, file); per > 1024 {
				t.Errorf("%d bytes a sample record, want at most 1024", per)
			} else {
				t.Logf("%d bytes a sample record", per)
			}
			var stdout, stderr bytes.Buffer
			if code := run([]string{"report", "-i", file}, &stdout, &stderr); code != 0 {
				t.Fatalf("report: exit %d: %s", code, stderr.String())
			}
			if inc > 0 && !strings.Contains(stdout.String(), "where the unwind tables stop") {
				t.Errorf("report does not say why stacks are incomplete:\n%s", firstLine(stdout.String()))
			}
			if r.Name != "debian-3.1-bookworm" {
				return
			}
			// The peer: the 8 KiB stack copy alone.
			copyFile := filepath.Join(t.TempDir(), "copy.data")
			record(t, "-F", "499", "--unwind", "copy", "-o", copyFile, "--", r.Exe, script, "1.5")
			cn, cinc, ctables, _ := incomplete(t, copyFile)
			t.Logf("--unwind copy: %d samples, %d incomplete", cn, cinc)
			if ctables != 0 || float64(cinc) < 0.5*float64(cn) {
				t.Errorf("--unwind copy: %d of %d samples incomplete, %d unwound with tables: the copy was meant to cut most", cinc, cn, ctables)
			}
		})
	}
}

// TestRecordMuslDebugFile: the musl Ruby, recorded through a stripped
// musl whose unwind tables are in its separate debug file (as Alpine's with
// musl-dbg installed), unwinds as deep as on glibc: in the native view, at
// most 0.5% of samples under [native unwind incomplete] (besides any taken
// before the tables were loaded), so the bottom frames are the threads'
// starts (musl's _start has no symbol type, and is named from the entry
// point). The same Ruby on Debian's musl, whose debug file is not
// installed here, loses most stacks there, and record says which file to
// give a debug file, naming it.
func TestRecordMuslDebugFile(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	script, _ := filepath.Abs("../../testdata/ruby/nativedeep.rb")
	native := func(t *testing.T, file string) (samples, incomplete, tables int) {
		stats, err := readback.ReadStacks(file, readback.ReadOptions{Merge: merge.Options{View: merge.ViewNative}},
			func(merge.Stack) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return stats.Samples, stats.Incomplete, stats.TableUnwound
	}
	const warning = "has call frame information for little of its code"

	dbg := testruby.Get(t, "source-3.3-musl-dbg")
	file := filepath.Join(t.TempDir(), "dbg.data")
	_, stderr := recordOutput(t, "-F", "499", "-o", file, "--", dbg.Exe, script, "1.5")
	n, inc, tables := native(t, file)
	t.Logf("with the debug file: %d samples, %d unwound with the tables, %d incomplete", n, tables, inc)
	if n < 300 {
		t.Fatalf("only %d samples", n)
	}
	if float64(inc) > 0.005*float64(n)+float64(n-tables) {
		t.Errorf("%d of %d samples under [native unwind incomplete] in the native view, %d unwound without the tables", inc, n, n-tables)
	}
	if strings.Contains(stderr, warning) {
		t.Errorf("record warned of missing unwind tables with the debug file in place:\n%s", stderr)
	}

	base := testruby.Get(t, "source-3.3-musl")
	file = filepath.Join(t.TempDir(), "base.data")
	_, stderr = recordOutput(t, "-F", "499", "-o", file, "--", base.Exe, script, "1")
	n, inc, _ = native(t, file)
	t.Logf("without: %d samples, %d incomplete", n, inc)
	if float64(inc) < 0.5*float64(n) {
		t.Errorf("without the debug file, only %d of %d samples incomplete: is Debian's musl built with unwind tables now? (then this test shows nothing)", inc, n)
	}
	if !strings.Contains(stderr, warning) || !strings.Contains(stderr, "musl") {
		t.Errorf("record did not say which file lacks unwind tables:\n%s", stderr)
	}
}

// sampleBytes is the average size of the sample records in file.
func sampleBytes(t *testing.T, file string) int {
	t.Helper()
	r, err := perfdata.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Only(perfdata.RecordSample)
	n, bytes := 0, 0
	for r.Next() {
		n++
		bytes += len(r.Raw())
	}
	if err := r.Err(); err != nil || n == 0 {
		t.Fatalf("%s: %d samples, %v", file, n, err)
	}
	return bytes / n
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
