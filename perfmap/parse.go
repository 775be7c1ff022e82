package perfmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Limits on what is read from a perf map, which may come from anyone: a
// JIT, another tool, or a file planted in /tmp.
const (
	// MaxLine is the longest line read, newline included. Longer lines are
	// skipped whole, like other junk.
	MaxLine = 64 << 10
	// MaxEntries is the most entries Parse returns.
	MaxEntries = 1 << 22
	// MaxFileBytes is the most bytes a Scanner reads. A long-running
	// process with --yjit-perf writes some tens of megabytes.
	MaxFileBytes = 1 << 30
)

// Errors a Scanner or Parse returns when a limit is reached; the entries
// before it are still good.
var (
	ErrTooLarge       = errors.New("perf map larger than 1 GiB")
	ErrTooManyEntries = errors.New("perf map has more than 4194304 entries")
)

// Entry is one line of a perf map: the symbol Name covers the absolute
// addresses [Start, Start+Size).
type Entry struct {
	Start, Size uint64
	Name        string
}

// End returns Start+Size, or 2^64-1 if that overflows.
func (e Entry) End() uint64 {
	if e.Start+e.Size < e.Start {
		return ^uint64(0)
	}
	return e.Start + e.Size
}

// String formats e as a perf map line without its newline.
func (e Entry) String() string { return fmt.Sprintf("%x %x %s", e.Start, e.Size, e.Name) }

// Scanner reads the entries of a perf map one at a time, skipping lines
// that are not entries. It reads at most MaxFileBytes and holds at most
// one line (MaxLine bytes) in memory.
//
// A line is an entry when it is START SEP SIZE SEP NAME: START and SIZE
// in hex of at most 64 bits, each optionally prefixed by 0x and preceded
// by spaces or tabs; SEP any one byte; NAME the non-empty rest of the line
// without a trailing "\r", up to a NUL byte. That is what perf 6.1 reads (it parses with
// strtoull and skips exactly one byte after each number), except that
// perf also turns lines without digits into symbols near address 0, which
// are skipped here as junk. Perf ignores entries whose name is shorter
// than 3 bytes; Scanner returns them.
type Scanner struct {
	r       *bufio.Reader
	entry   Entry
	err     error // the error Err returns
	done    bool
	read    int64
	lines   int
	skipped int
}

// NewScanner returns a Scanner reading r.
func NewScanner(r io.Reader) *Scanner {
	return &Scanner{r: bufio.NewReaderSize(r, MaxLine)}
}

// Scan advances to the next entry, returning false at the end of the
// input or on an error (see Err).
func (s *Scanner) Scan() bool {
	long := false // inside a line longer than MaxLine
	for !s.done {
		line, err := s.r.ReadSlice('\n')
		s.read += int64(len(line))
		if s.read > MaxFileBytes {
			s.err, s.done = ErrTooLarge, true
			return false
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long = true
			continue
		case errors.Is(err, io.EOF):
			s.done = true
			if len(line) == 0 {
				if long { // the long line ended the input
					s.lines++
					s.skipped++
				}
				return false
			}
		case err != nil:
			s.err, s.done = fmt.Errorf("read perf map: %w", err), true
			return false
		}
		s.lines++
		if long {
			long = false
			s.skipped++
			continue
		}
		if e, ok := parseLine(line); ok {
			s.entry = e
			return true
		}
		s.skipped++
	}
	return false
}

// Entry returns the entry Scan found.
func (s *Scanner) Entry() Entry { return s.entry }

// Err returns the error that ended the scan, or nil at the end of the input.
func (s *Scanner) Err() error { return s.err }

// Lines returns how many lines were read so far, and how many of them were
// skipped as not being entries.
func (s *Scanner) Lines() (lines, skipped int) { return s.lines, s.skipped }

// Parse reads every entry of a perf map in file order, skipping junk lines
// (see Scanner). On an error it returns the entries read before it: a read
// error, ErrTooLarge, or ErrTooManyEntries.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	s := NewScanner(r)
	for s.Scan() {
		if len(out) == MaxEntries {
			return out, fmt.Errorf("parse perf map: %w", ErrTooManyEntries)
		}
		out = append(out, s.Entry())
	}
	if err := s.Err(); err != nil {
		return out, fmt.Errorf("parse perf map: %w", err)
	}
	return out, nil
}

// parseLine parses one line, with or without its newline.
func parseLine(line []byte) (Entry, bool) {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	start, line, ok := parseHex(line)
	if !ok || len(line) == 0 {
		return Entry{}, false
	}
	size, line, ok := parseHex(line[1:])
	if !ok || len(line) < 2 { // a separator and a name
		return Entry{}, false
	}
	name := line[1:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i] // perf copies the name as a C string
	}
	if len(name) == 0 {
		return Entry{}, false
	}
	return Entry{Start: start, Size: size, Name: string(name)}, true
}

// parseHex parses blanks, an optional 0x, and at least one hex digit,
// returning the value and the rest of b. It fails on overflow.
func parseHex(b []byte) (uint64, []byte, bool) {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	if len(b) > 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') && hexDigit(b[2]) >= 0 {
		b = b[2:]
	}
	var v uint64
	n := 0
	for ; n < len(b); n++ {
		d := hexDigit(b[n])
		if d < 0 {
			break
		}
		if v>>60 != 0 {
			return 0, nil, false
		}
		v = v<<4 | uint64(d)
	}
	return v, b[n:], n > 0
}

func hexDigit(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
