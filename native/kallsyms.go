package native

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Bounds on kallsyms text: lines, and one line's bytes (an address, a type,
// a name of at most KSYM_NAME_LEN (512) and a module's name).
const (
	maxKallsymsLines = 1 << 23
	maxKallsymsLine  = 1 << 10
)

// Kernel names kernel addresses from /proc/kallsyms text.
type Kernel struct {
	syms []symbol // text symbols, sorted by start; size 0 = until the next
}

// ParseKallsyms reads kallsyms text ("ffffffff81000000 T _stext"): the
// text symbols with an address (lines of other kinds are passed over). It
// holds the names in one string, so what it keeps is at most the text read
// and 24 bytes a symbol. It stops at a read error, a line over
// maxKallsymsLine bytes or past maxKallsymsLines lines, and returns the
// symbols read so far with the error.
func ParseKallsyms(r io.Reader) (*Kernel, error) {
	var names strings.Builder
	type pending struct {
		start    uint64
		off, len int
	}
	var syms []pending
	finish := func(err error) (*Kernel, error) {
		all := names.String()
		k := &Kernel{syms: make([]symbol, len(syms))}
		for i, s := range syms {
			k.syms[i] = symbol{start: s.start, name: all[s.off : s.off+s.len]}
		}
		sort.Slice(k.syms, func(i, j int) bool { return k.syms[i].start < k.syms[j].start })
		return k, err
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxKallsymsLine)
	n := 0
	for ; sc.Scan(); n++ {
		if n == maxKallsymsLines {
			return finish(fmt.Errorf("kallsyms: over %d lines", maxKallsymsLines))
		}
		addr, kind, name, ok := kallsymsLine(sc.Bytes())
		if !ok || addr == 0 || (kind != 't' && kind != 'T' && kind != 'w' && kind != 'W') {
			continue
		}
		syms = append(syms, pending{addr, names.Len(), len(name)})
		names.Write(name)
	}
	err := sc.Err()
	if err == bufio.ErrTooLong {
		err = fmt.Errorf("kallsyms: line %d over %d bytes", n+1, maxKallsymsLine)
	}
	return finish(err)
}

// kallsymsLine splits a kallsyms line into its address, type and name; ok
// is false for a line that is not one.
func kallsymsLine(line []byte) (addr uint64, kind byte, name []byte, ok bool) {
	hex, rest := field(line) // address, type, name, [module]
	typ, rest := field(rest)
	name, _ = field(rest)
	// The kernel prints an address as wide as a pointer, zeros when hidden.
	if len(hex) != 16 && len(hex) != 8 || len(typ) != 1 || len(name) == 0 {
		return 0, 0, nil, false
	}
	for _, c := range hex {
		switch {
		case c >= '0' && c <= '9':
			addr = addr<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			addr = addr<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			addr = addr<<4 | uint64(c-'A'+10)
		default:
			return 0, 0, nil, false
		}
	}
	return addr, typ[0], name, true
}

// field is the first field of b, separated by spaces or tabs, and the rest.
func field(b []byte) (f, rest []byte) {
	b = bytes.TrimLeft(b, " \t")
	if i := bytes.IndexAny(b, " \t"); i >= 0 {
		return b[:i], b[i:]
	}
	return b, nil
}

// Symbol names the kernel function holding addr.
func (k *Kernel) Symbol(addr uint64) (string, uint64, bool) {
	if k == nil {
		return "", 0, false
	}
	i := sort.Search(len(k.syms), func(i int) bool { return k.syms[i].start > addr }) - 1
	if i < 0 {
		return "", 0, false
	}
	return k.syms[i].name, addr - k.syms[i].start, true
}
