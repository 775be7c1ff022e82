package native

import (
	"bufio"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Bounds on kallsyms text.
const (
	maxKallsymsLines = 1 << 23
	maxKallsymsLine  = 1 << 10
)

// Kernel names kernel addresses from /proc/kallsyms text.
type Kernel struct {
	syms []symbol // text symbols, sorted by start; size 0 = until the next
}

// ParseKallsyms reads kallsyms text ("ffffffff81000000 T _stext").
func ParseKallsyms(r io.Reader) *Kernel {
	k := &Kernel{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxKallsymsLine)
	for n := 0; sc.Scan() && n < maxKallsymsLines; n++ {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || (f[1] != "t" && f[1] != "T" && f[1] != "w" && f[1] != "W") {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || addr == 0 {
			continue
		}
		k.syms = append(k.syms, symbol{start: addr, name: f[2]})
	}
	sort.Slice(k.syms, func(i, j int) bool { return k.syms[i].start < k.syms[j].start })
	return k
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
