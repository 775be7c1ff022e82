package native

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// VDSOPath is how perf and /proc name the vDSO mapping.
const VDSOPath = "[vdso]"

// maxVDSO bounds the vDSO image (it is two pages on x86_64).
const maxVDSO = 1 << 20

var (
	vdsoOnce sync.Once
	vdsoFile string
	vdsoErr  error
)

// vdsoObject loads the vDSO of this process: the kernel maps the same image
// into every process, so it unwinds and names a target's vDSO frames (on the
// machine that recorded them).
func vdsoObject() *Object {
	vdsoOnce.Do(func() { vdsoFile, vdsoErr = dumpVDSO() })
	if vdsoErr != nil {
		return &Object{Path: VDSOPath, err: vdsoErr}
	}
	o := LoadObject(vdsoFile)
	o.Path = VDSOPath
	return o
}

func dumpVDSO() (string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, " [vdso]") {
			continue
		}
		lo, hi, _ := strings.Cut(strings.Fields(line)[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start || end-start > maxVDSO {
			return "", fmt.Errorf("vdso: bad mapping %q", line)
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return "", err
		}
		defer mem.Close()
		b := make([]byte, end-start)
		if _, err := mem.ReadAt(b, int64(start)); err != nil {
			return "", fmt.Errorf("vdso: %w", err)
		}
		tmp, err := os.CreateTemp("", "rubyperf-vdso-*.so")
		if err != nil {
			return "", err
		}
		defer tmp.Close()
		if _, err := tmp.Write(b); err != nil {
			return "", err
		}
		return tmp.Name(), nil
	}
	return "", fmt.Errorf("vdso: not mapped in this process")
}
