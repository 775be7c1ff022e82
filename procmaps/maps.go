package procmaps

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Limits on /proc/PID/maps: a process with a million mappings is no one's shape.
const (
	maxLines = 1 << 20
	maxLine  = 8 << 10
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End, Offset, Inode uint64
	Perms                     string
	Path                      string // as the process sees it; " (deleted)" removed
	Deleted                   bool
}

// Read parses /proc/PID/maps. The error is the open's as it came, for the
// caller to name the pid and the privilege it lacks.
func Read(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mappings in /proc/PID/maps's format, skipping lines it cannot.
func Parse(r io.Reader) ([]Mapping, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxLine)
	var out []Mapping
	for n := 0; sc.Scan(); n++ {
		if n >= maxLines {
			return nil, fmt.Errorf("maps: more than %d lines", maxLines)
		}
		if m, ok := ParseLine(sc.Text()); ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("maps: %w", err)
	}
	return out, nil
}

// ParseLine reads "start-end perms offset dev inode   path"; the path is
// everything after the inode, and may contain spaces.
func ParseLine(line string) (Mapping, bool) {
	rest := line
	var f [5]string
	for i := range f {
		rest = strings.TrimLeft(rest, " ")
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			if i < 4 {
				return Mapping{}, false
			}
			j = len(rest)
		}
		f[i], rest = rest[:j], rest[j:]
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Mapping{}, false
	}
	m := Mapping{Perms: f[1]}
	var err [4]error
	m.Start, err[0] = strconv.ParseUint(lo, 16, 64)
	m.End, err[1] = strconv.ParseUint(hi, 16, 64)
	m.Offset, err[2] = strconv.ParseUint(f[2], 16, 64)
	m.Inode, err[3] = strconv.ParseUint(f[4], 10, 64)
	for _, e := range err {
		if e != nil {
			return Mapping{}, false
		}
	}
	if m.End < m.Start {
		return Mapping{}, false
	}
	m.Path = strings.TrimLeft(rest, " ")
	if p, ok := strings.CutSuffix(m.Path, " (deleted)"); ok {
		m.Path, m.Deleted = p, true
	}
	return m, true
}
