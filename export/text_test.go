package export

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Foo#bar", "Foo#bar"},
		{"block (2 levels) in <main>", "block (2 levels) in <main>"},
		{"Café#naïve 日本", "Café#naïve 日本"},
		{`C:\path\n`, `C:\path\n`}, // backslashes are kept: for reading, not unquoting
		{"a\nb\r\tc", `a\nb\r\tc`},
		{"evil\n\x1b]0;pwned\a\x00path.rb", `evil\n\x1b]0;pwned\a\x00path.rb`},
		{"\x1b[31mred\x7f", `\x1b[31mred\x7f`},
		{"\u0085next\u009b2J", `\u0085next\u009b2J`},
		{"a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"caf\xe9 \xff\xfe", `caf\xe9 \xff\xfe`},
		{"\xe2\x80", `\xe2\x80`}, // a cut rune: each byte
		{"", ""},
	} {
		if got := Printable(tc.in); got != tc.want {
			t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPrintableEveryByte: whatever the bytes, the result is valid UTF-8
// without a control character or line separator, and text that needed no
// escape is returned as it is.
func TestPrintableEveryByte(t *testing.T) {
	var all []byte
	for b := range 256 {
		all = append(all, byte(b), 'x')
	}
	for _, s := range []string{string(all), strings.Repeat("\xc2\x85\xe2\x80\xa8", 3)} {
		got := Printable(s)
		if !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool {
			return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
		}) {
			t.Errorf("Printable(%q) = %q", s, got)
		}
	}
}

func FuzzPrintable(f *testing.F) {
	f.Add("a\nb\x1b[0m\xff\u0085")
	f.Fuzz(func(t *testing.T, s string) {
		got := Printable(s)
		if !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool {
			return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
		}) {
			t.Fatalf("Printable(%q) = %q", s, got)
		}
		if (got == s) != printableAlready(s) {
			t.Fatalf("Printable(%q) = %q, but printableAlready says %v", s, got, printableAlready(s))
		}
		if string(AppendPrintable([]byte("x"), s)) != "x"+got {
			t.Fatalf("AppendPrintable and Printable differ on %q", s)
		}
	})
}

func TestLineWriter(t *testing.T) {
	var buf bytes.Buffer
	w := LineWriter{W: &buf}
	n, err := w.Write([]byte("rubyperf: pid 7 (ruby \x1b]0;x\a\nfake line): skipped\n"))
	if err != nil || n != len("rubyperf: pid 7 (ruby \x1b]0;x\a\nfake line): skipped\n") {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if want := `rubyperf: pid 7 (ruby \x1b]0;x\a\nfake line): skipped` + "\n"; buf.String() != want {
		t.Errorf("wrote %q, want %q", buf.String(), want)
	}
}
