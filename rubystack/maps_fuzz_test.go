package rubystack

import (
	"strings"
	"testing"
)

func FuzzParseMaps(f *testing.F) {
	f.Add("55d0c5a00000-55d0c5a01000 r--p 00000000 fe:01 1234   /usr/bin/ruby3.1\n" +
		"7f1c2e000000-7f1c2e100000 r-xp 00100000 fe:01 99 /usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1 (deleted)\n" +
		"7ffd1a2b0000-7ffd1a2d1000 rw-p 00000000 00:00 0                          [stack]\n")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := parseMaps(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End < m.Start {
				t.Fatalf("mapping end %#x before start %#x", m.End, m.Start)
			}
		}
	})
}
