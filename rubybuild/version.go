package rubybuild

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a Ruby release number, as RUBY_VERSION spells it.
type Version struct{ Major, Minor, Patch int }

// ParseVersion reads "3.3.8" (and tolerates a suffix such as "3.4.0-preview1").
func ParseVersion(s string) (Version, error) {
	core, _, _ := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("ruby version %q: want MAJOR.MINOR.PATCH", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > 999 {
			return Version{}, fmt.Errorf("ruby version %q: bad number %q", s, p)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less orders versions.
func (v Version) Less(w Version) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}
