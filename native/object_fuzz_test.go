package native

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rubyperf/rubyperf/internal/debuginfodtest"
)

// FuzzLoadObject: an object file and the debug file beside it are
// untrusted (a debug file may come from a debuginfod server): loading
// them, compiling the table and naming addresses never panics nor runs
// away, whatever their bytes.
func FuzzLoadObject(f *testing.F) {
	dir := f.TempDir()
	with := debuginfodtest.CLib(f, mkdir(f, dir, "with"))
	without := manyFuncsLib(f, mkdir(f, dir, "without"), 2*minThinFuncs, "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
	sp := debuginfodtest.SplitDebug(f, without, filepath.Join(dir, "split", "libfake.so.1"), filepath.Join(dir, "split", "libfake.so.1.debug"))
	for _, pair := range [][2]string{{with, ""}, {sp.Stripped, sp.Debug}} {
		obj, _ := os.ReadFile(pair[0])
		var debug []byte
		if pair[1] != "" {
			debug, _ = os.ReadFile(pair[1])
		}
		f.Add(obj, debug)
		f.Add(obj[:len(obj)/2], debug)
	}
	f.Fuzz(func(t *testing.T, obj, debug []byte) {
		d := t.TempDir()
		path := filepath.Join(d, "libfake.so.1")
		os.WriteFile(path, obj, 0o644)
		if len(debug) > 0 {
			os.WriteFile(filepath.Join(d, "libfake.so.1.debug"), debug, 0o644)
		}
		o := LoadObject(path)
		o.ThinCFI()
		if tab, err := o.Table(ArchX86_64); err == nil {
			tab.Lookup(0x1100)
		}
		for _, a := range []uint64{0, 0x1000, 0x1100, 0x1140, 1 << 40} {
			o.Symbol(a)
			o.frameAt(a)
		}
	})
}

func mkdir(t testing.TB, parts ...string) string {
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
