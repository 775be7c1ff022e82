package procmaps

import (
	"os"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	m, ok := ParseLine("7f1c2e000000-7f1c2e100000 r-xp 00100000 fe:01 99   /usr/lib/a b.so (deleted)")
	if !ok || m.Start != 0x7f1c2e000000 || m.End != 0x7f1c2e100000 || m.Offset != 0x100000 || m.Perms != "r-xp" ||
		m.Inode != 99 || m.Path != "/usr/lib/a b.so" || !m.Deleted {
		t.Errorf("%+v, %v", m, ok)
	}
	m, ok = ParseLine("7ffd1a2b0000-7ffd1a2d1000 rw-p 00000000 00:00 0")
	if !ok || m.Path != "" || m.Inode != 0 {
		t.Errorf("%+v, %v", m, ok)
	}
	for _, bad := range []string{"", "x", "1-0 r--p 0 00:00 0", "1-2 r--p zz 00:00 0", "1-2 r--p 0 00:00"} {
		if _, ok := ParseLine(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestReadSelf: this process's own maps hold its executable.
func TestReadSelf(t *testing.T) {
	maps, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	for _, m := range maps {
		if m.Path == exe && strings.Contains(m.Perms, "x") {
			return
		}
	}
	t.Errorf("no executable mapping of %s in %d mappings", exe, len(maps))
}

func FuzzParseMaps(f *testing.F) {
	f.Add("55d0c5a00000-55d0c5a01000 r--p 00000000 fe:01 1234   /usr/bin/ruby3.1\n" +
		"7f1c2e000000-7f1c2e100000 r-xp 00100000 fe:01 99 /usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1 (deleted)\n" +
		"7ffd1a2b0000-7ffd1a2d1000 rw-p 00000000 00:00 0                          [stack]\n")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := Parse(strings.NewReader(s))
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
