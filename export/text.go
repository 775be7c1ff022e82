package export

import (
	"io"
	"strconv"
	"unicode/utf8"
)

// Printable returns s as text that a terminal and a line-based reader take
// at face value: one line, with nothing a terminal would act on. A name or
// path read from a target (a label, an eval's file name, a thread name, a
// library's path or symbol) may hold any bytes; every text output of
// rubyperf passes it through here, so a frame stays one line and an escape
// sequence is shown, never sent. What would be misread is written as an
// escape, in the style of Go and C string literals:
//
//   - \a \b \t \n \v \f \r for those C0 controls, \xHH for the other C0
//     controls (NUL is \x00, ESC \x1b) and for DEL (\x7f);
//   - \u0080 to \u009f for the C1 controls (U+009B is a CSI to some
//     terminals, U+0085 a line break to Python's splitlines);
//   - \u2028 and \u2029, the line and paragraph separators, line breaks to
//     Python and JavaScript;
//   - \xHH for each byte that is not part of valid UTF-8.
//
// Everything else is kept, backslashes included, so an ordinary name reads
// the same in every output and in perf's: the result is for reading, not
// for unquoting.
func Printable(s string) string {
	if printableAlready(s) {
		return s
	}
	return string(AppendPrintable(make([]byte, 0, len(s)+8), s))
}

// AppendPrintable appends Printable(s) to buf.
func AppendPrintable(buf []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			buf = append(buf, c)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			buf = appendControl(buf, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			buf = appendHexByte(buf, c)
		case r >= 0x80 && r <= 0x9f || r == '\u2028' || r == '\u2029':
			buf = append(buf, `\u`...)
			buf = appendHex(buf, uint64(r), 4)
		default:
			buf = append(buf, s[i:i+n]...)
		}
		i += n
	}
	return buf
}

// printableAlready reports whether Printable(s) is s, without allocating.
func printableAlready(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return false
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r >= 0x80 && r <= 0x9f || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += n
	}
	return true
}

// appendControl appends the escape of an ASCII control byte (C0 or DEL).
func appendControl(buf []byte, c byte) []byte {
	switch c {
	case '\a':
		return append(buf, `\a`...)
	case '\b':
		return append(buf, `\b`...)
	case '\t':
		return append(buf, `\t`...)
	case '\n':
		return append(buf, `\n`...)
	case '\v':
		return append(buf, `\v`...)
	case '\f':
		return append(buf, `\f`...)
	case '\r':
		return append(buf, `\r`...)
	}
	return appendHexByte(buf, c)
}

// appendHexByte appends \xHH.
func appendHexByte(buf []byte, c byte) []byte {
	return appendHex(append(buf, `\x`...), uint64(c), 2)
}

// appendHex appends v in lower-case hex, zero-padded to width digits.
func appendHex(buf []byte, v uint64, width int) []byte {
	var num [16]byte
	n := strconv.AppendUint(num[:0], v, 16)
	for range width - len(n) {
		buf = append(buf, '0')
	}
	return append(buf, n...)
}

// LineWriter passes each Write to w as one line of Printable text: the
// write's final newline is kept, every other byte escaped. Warnings that
// quote what a target named (a process's command line, a file it mapped)
// go through it, written one line per Write as fmt.Fprintf does.
type LineWriter struct{ W io.Writer }

// Write writes Printable(p), keeping one trailing newline; it reports
// len(p) written when the whole line was.
func (lw LineWriter) Write(p []byte) (int, error) {
	line := p
	nl := len(line) > 0 && line[len(line)-1] == '\n'
	if nl {
		line = line[:len(line)-1]
	}
	out := AppendPrintable(make([]byte, 0, len(p)+8), string(line))
	if nl {
		out = append(out, '\n')
	}
	if _, err := lw.W.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
