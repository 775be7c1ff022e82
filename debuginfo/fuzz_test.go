package debuginfo

import (
	"bytes"
	"debug/elf"
	"os"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
)

// FuzzReadIdentity feeds arbitrary bytes as an ELF file: reading its
// identity never panics, and what it returns is safe to build paths from.
func FuzzReadIdentity(f *testing.F) {
	dir := f.TempDir()
	lib := debuginfodtest.CLib(f, dir)
	sp := debuginfodtest.SplitDebug(f, lib, dir+"/stripped.so", dir+"/x.debug")
	for _, p := range []string{lib, sp.Stripped, sp.Debug} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkHeaders(bytes.NewReader(data)); err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("checkHeaders: %q is not one line", err)
		}
		var id Identity
		err := Guard(func() error {
			ef, err := elf.NewFile(bytes.NewReader(data))
			if err != nil {
				return err
			}
			id = ReadIdentity(ef)
			return nil
		})
		if err != nil {
			return
		}
		if id.BuildID != "" && !ValidBuildID(id.BuildID) {
			t.Errorf("build-id %q is not clean hex", id.BuildID)
		}
		if id.Link != "" && !plainName(id.Link) {
			t.Errorf("debuglink %q is not a plain name", id.Link)
		}
		parseBuildIDNote(data, binaryLE{})
		if name, _ := parseDebugLink(data, binaryLE{}); name != "" && !plainName(name) {
			t.Errorf("debuglink %q is not a plain name", name)
		}
	})
}

type binaryLE struct{}

func (binaryLE) Uint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
