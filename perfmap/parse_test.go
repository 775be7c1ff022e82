package perfmap

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// What Ruby's JITs write: YJIT 3.3+ ("{:x} {:x} [JIT] {name}", one line in
// several write calls), ZJIT in its two forms ("{:#x}" and "{:x}").
const jitLines = "7f8a3c00a000 40 [JIT] Integer#times\n" +
	"7f8a3c00a040 1c8 [JIT] block in <main>@foo.rb:3\n" +
	"0x7f8a3c010000 0x80 zjit::Object#fib@fib.rb:1\n" +
	"7f8a3c010080 20 zjit::<main>\n"

var jitEntries = []Entry{
	{0x7f8a3c00a000, 0x40, "[JIT] Integer#times"},
	{0x7f8a3c00a040, 0x1c8, "[JIT] block in <main>@foo.rb:3"},
	{0x7f8a3c010000, 0x80, "zjit::Object#fib@fib.rb:1"},
	{0x7f8a3c010080, 0x20, "zjit::<main>"},
}

func TestParseJITLines(t *testing.T) {
	got, err := Parse(strings.NewReader(jitLines))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, jitEntries) {
		t.Fatalf("got %v\nwant %v", got, jitEntries)
	}
}

func TestParseLines(t *testing.T) {
	for _, c := range []struct {
		line string
		want *Entry
	}{
		{"1000 10 abc", &Entry{0x1000, 0x10, "abc"}},
		{"1000 10 abc\n", &Entry{0x1000, 0x10, "abc"}},
		{"1000 10 abc\r\n", &Entry{0x1000, 0x10, "abc"}},
		{"0X1000 0x10 abc", &Entry{0x1000, 0x10, "abc"}},
		{"DEADBEEF 1F Up", &Entry{0xdeadbeef, 0x1f, "Up"}},
		{"1000\t10\ttabs", &Entry{0x1000, 0x10, "tabs"}},
		{"1000,10,comma", &Entry{0x1000, 0x10, "comma"}}, // perf skips any one byte
		{"  1000  10 blanks", &Entry{0x1000, 0x10, "blanks"}},
		{"1000 10  leading space", &Entry{0x1000, 0x10, " leading space"}},
		{"1000 0 empty", &Entry{0x1000, 0, "empty"}},
		{"1000 10 a", &Entry{0x1000, 0x10, "a"}}, // perf ignores it; we return it
		{"ffffffffffffffff ffffffffffffffff max", &Entry{^uint64(0), ^uint64(0), "max"}},
		{"0000000000000000001000 10 zeros", &Entry{0x1000, 0x10, "zeros"}},
		{"1000 10 x y <z> (a)", &Entry{0x1000, 0x10, "x y <z> (a)"}},
		{"", nil},
		{"\n", nil},
		{"1000", nil},
		{"1000 ", nil},
		{"1000 10", nil},
		{"1000 10 ", nil},
		{"hello world foo", nil},
		{"# comment", nil},
		{"0x 10 name", &Entry{0, 0x10, "name"}}, // as strtoull: "0", separator "x"
		{"10000000000000000 10 overflow", nil},
		{"1000 10000000000000000 overflow", nil},
		{"1000 zz name", nil},
		{"-1000 10 neg", nil},
	} {
		got, ok := parseLine([]byte(c.line))
		if c.want == nil {
			if ok {
				t.Errorf("%q: got %v, want no entry", c.line, got)
			}
			continue
		}
		if !ok || got != *c.want {
			t.Errorf("%q: got %v %v, want %v", c.line, got, ok, *c.want)
		}
	}
}

func TestParseSkipsJunk(t *testing.T) {
	long := strings.Repeat("7", MaxLine+10)
	first, rest, _ := strings.Cut(jitLines, "\n")
	in := "junk\n" + long + " 10 toolong\n" + first + "\n\n" + strings.Repeat("x", 3*MaxLine) + "\n" +
		rest + "1000 10 last line without newline"
	s := NewScanner(strings.NewReader(in))
	var got []Entry
	for s.Scan() {
		got = append(got, s.Entry())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]Entry{}, jitEntries...), Entry{0x1000, 0x10, "last line without newline"})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if lines, skipped := s.Lines(); lines != 9 || skipped != 4 {
		t.Errorf("lines %d skipped %d, want 9 and 4", lines, skipped)
	}
	// A long line at the very end.
	s = NewScanner(strings.NewReader("1000 10 abc\n" + long))
	for s.Scan() {
	}
	if lines, skipped := s.Lines(); lines != 2 || skipped != 1 || s.Err() != nil {
		t.Errorf("long last line: lines %d skipped %d err %v", lines, skipped, s.Err())
	}
}

// endless is an io.Reader that never ends.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

func TestParseBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 1 GiB")
	}
	start := time.Now()
	_, err := Parse(endless('7'))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("endless input: %v, want ErrTooLarge", err)
	}
	t.Logf("1 GiB of one line refused in %v", time.Since(start))
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestParseReadError(t *testing.T) {
	got, err := Parse(io.MultiReader(strings.NewReader(jitLines), errReader{}))
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != len(jitEntries) {
		t.Fatalf("got %d entries, %v", len(got), err)
	}
}

func TestEntryString(t *testing.T) {
	e := Entry{0x7f00000000001000, 0x10, "Object#foo"}
	if got := e.String(); got != "7f00000000001000 10 Object#foo" {
		t.Fatal(got)
	}
	back, err := Parse(bytes.NewReader([]byte(e.String())))
	if err != nil || len(back) != 1 || back[0] != e {
		t.Fatalf("%v %v", back, err)
	}
	if (Entry{Start: ^uint64(0) - 1, Size: 5}).End() != ^uint64(0) {
		t.Fatal("End does not saturate")
	}
}
