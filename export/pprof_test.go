package export

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
)

// writeTestPprof writes the test profile and parses it back.
func writeTestPprof(t *testing.T, stacks []merge.Stack) ([]byte, *profile.Profile) {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePprof(&buf, stacks, PprofOptions{Period: testPeriod}); err != nil {
		t.Fatal(err)
	}
	if b := buf.Bytes(); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("output is not gzipped")
	}
	p, err := profile.Parse(bytes.NewReader(buf.Bytes())) // also runs CheckValid
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), p
}

// TestPprofRoundTrip parses the written profile and checks its header, its
// totals, that every sample gives back the stacks it stands for (names,
// thread labels, counts), and how each kind of frame is represented.
func TestPprofRoundTrip(t *testing.T) {
	stacks := testStacks()
	_, p := writeTestPprof(t, stacks)

	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if got := strings.Join(types, " "); got != "samples/count cpu/nanoseconds" || p.DefaultSampleType != "cpu" {
		t.Errorf("sample types %s, default %q", got, p.DefaultSampleType)
	}
	if p.PeriodType == nil || p.PeriodType.Type != "cpu" || p.PeriodType.Unit != "nanoseconds" || p.Period != testPeriod {
		t.Errorf("period %v %d", p.PeriodType, p.Period)
	}
	if want := int64(len(stacks)) * testPeriod; p.DurationNanos != want {
		t.Errorf("duration %d, want %d (from a period before the first sample to the last)", p.DurationNanos, want)
	}

	// The stacks, as pprof gives them back, against the stacks written.
	type key struct {
		thread   string
		pid, tid int64
		names    string
	}
	want := make(map[key][2]int64)
	for _, s := range stacks {
		var names []string
		for i := range s.Frames {
			names = append(names, FrameName(&s.Frames[i]))
		}
		k := key{threadName(&s), int64(s.PID), int64(s.TID), strings.Join(names, "|")}
		v := want[k]
		want[k] = [2]int64{v[0] + 1, v[1] + int64(s.Period)}
	}
	got := make(map[key][2]int64)
	for _, s := range p.Sample {
		var names []string
		for _, l := range s.Location {
			if len(l.Line) != 1 {
				t.Fatalf("location %d has %d lines", l.ID, len(l.Line))
			}
			names = append(names, l.Line[0].Function.Name)
		}
		if len(s.Label["thread"]) != 1 || len(s.Label["pid"]) != 1 || len(s.Label["tid"]) != 1 || len(s.NumLabel) != 0 {
			t.Fatalf("sample labels %v %v", s.Label, s.NumLabel)
		}
		pid, _ := strconv.ParseInt(s.Label["pid"][0], 10, 64)
		tid, _ := strconv.ParseInt(s.Label["tid"][0], 10, 64)
		k := key{s.Label["thread"][0], pid, tid, strings.Join(names, "|")}
		if _, dup := got[k]; dup {
			t.Errorf("stack %v appears in two samples", k)
		}
		got[k] = [2]int64{s.Value[0], s.Value[1]}
	}
	if len(got) != len(want) {
		t.Errorf("%d samples, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v: values %v, want %v", k, got[k], v)
		}
	}

	// Interning: no two functions, locations or mappings alike.
	funcs := make(map[[2]string]bool)
	for _, f := range p.Function {
		k := [2]string{f.Name, f.Filename}
		if funcs[k] {
			t.Errorf("function %v twice", k)
		}
		funcs[k] = true
	}
	locs := make(map[string]bool)
	for _, l := range p.Location {
		k := fmt.Sprint(l.Mapping, l.Address, l.Line[0].Function.ID, l.Line[0].Line)
		if locs[k] {
			t.Errorf("location %s twice", k)
		}
		locs[k] = true
	}
	maps := make(map[string]bool)
	for _, m := range p.Mapping {
		k := fmt.Sprint(m.Start, m.Limit, m.Offset, m.File, m.BuildID)
		if maps[k] {
			t.Errorf("mapping %s twice", k)
		}
		maps[k] = true
		if !m.HasFunctions {
			t.Errorf("mapping %s lacks HasFunctions: pprof would try to symbolize it", m.File)
		}
	}
	if len(p.Mapping) != 5 { // ruby, libruby, libc, json's generator.so, the kernel
		t.Errorf("%d mappings, want 5", len(p.Mapping))
	}

	// Each frame kind as documented on WritePprof.
	byName := make(map[string]*profile.Location)
	for _, l := range p.Location {
		byName[fmt.Sprintf("%s:%d", l.Line[0].Function.Name, l.Line[0].Line)] = l
	}
	if l := byName["block in Foo#bar:10"]; l == nil || l.Mapping != nil || l.Address != 0 ||
		l.Line[0].Function.Filename != fooRB || l.Line[0].Function.SystemName != "" {
		t.Errorf("Ruby frame: %+v", l)
	}
	if l := byName["Integer#times:12"]; l == nil || l.Mapping != nil || l.Line[0].Function.Filename != benchRB {
		t.Errorf("C-method frame: %+v", l)
	}
	if l := byName["rb_ary_each:0"]; l == nil || l.Mapping == nil || l.Mapping.File != libRuby.file ||
		l.Mapping.Start != libRuby.start || l.Mapping.Limit != libRuby.limit || l.Mapping.Offset != libRuby.offset ||
		l.Mapping.BuildID != libRuby.buildID || l.Address < libRuby.start || l.Address >= libRuby.limit ||
		l.Line[0].Function.SystemName != "rb_ary_each" {
		t.Errorf("native frame: %+v", l)
	}
	if l := byName["do_syscall_64:0"]; l == nil || l.Mapping == nil || l.Mapping.File != "[kernel.kallsyms]" ||
		l.Address != 0xffffffff81f1b2e0 || l.Address < l.Mapping.Start || l.Address >= l.Mapping.Limit {
		t.Errorf("kernel frame: %+v", l)
	}
	if p.Mapping[0].File != exeRuby.file {
		t.Errorf("first mapping %s, want the executable", p.Mapping[0].File)
	}
}

// TestPprofDeterministic writes the profile twice.
func TestPprofDeterministic(t *testing.T) {
	a, _ := writeTestPprof(t, testStacks())
	b, _ := writeTestPprof(t, testStacks())
	if !bytes.Equal(a, b) {
		t.Errorf("two writes differ")
	}
}

// TestPprofEmpty writes a profile with no samples, which pprof accepts.
func TestPprofEmpty(t *testing.T) {
	writeTestPprof(t, nil)
}

// goTool returns the go command, skipping the test without it under
// internal/testskip's rule.
func goTool(t *testing.T) string {
	t.Helper()
	return testskip.Command(t, "go", "golang-go")
}

// TestPprofGoTool reads the profile with go tool pprof, the consumer, and
// pins what it prints: -top (flat and cumulative time by function),
// -traces (every sample with its labels), and -list of Foo#bar against
// the Ruby source in testdata/src, which shows time on the right lines.
// pprof must print nothing on stderr: no symbolization attempts.
// The goldens depend on pprof's output format, so a new Go release may
// need -update (review the diff).
func TestPprofGoTool(t *testing.T) {
	gocmd := goTool(t)
	data, _ := writeTestPprof(t, testStacks())
	path := filepath.Join(t.TempDir(), "cpu.pb.gz")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"pprof-top.txt", []string{"-top", "-nodecount=100"}},
		{"pprof-traces.txt", []string{"-traces"}},
		{"pprof-list.txt", []string{"-list", "^Foo#bar$", "-source_path", filepath.Join("testdata", "src"), "-trim_path", "/app"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			cmd := exec.Command(gocmd, append(append([]string{"tool", "pprof"}, tc.args...), path)...)
			cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("go tool pprof %v: %v\n%s", tc.args, err, stderr.String())
			}
			if stderr.Len() > 0 {
				t.Errorf("go tool pprof %v wrote to stderr:\n%s", tc.args, stderr.String())
			}
			golden(t, tc.golden, stdout.Bytes())
		})
	}
}

// TestPprofListLines checks the -list golden's substance: the time of
// Foo#bar falls on the lines of the source that ran.
func TestPprofListLines(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("testdata", "pprof-list.txt"))
	if err != nil {
		t.Fatal(err) // committed: TestPprofGoTool writes it with -update
	}
	for _, want := range []string{
		"50.51ms      9:    @items.each do |x|",
		"20.20ms     12:    s = \"ab\" * 100_000",
		"10.10ms     13:    $stdout.write(s)",
		"10.10ms     14:    self <=> Foo.new(@items.reverse)",
	} {
		if !slices.ContainsFunc(strings.Split(string(text), "\n"), func(l string) bool { return strings.HasSuffix(l, want) }) {
			t.Errorf("pprof -list has no line ending %q", want)
		}
	}
}
