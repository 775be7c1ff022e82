package rubybuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFakeRuby reads the small compiled fixture: version, DWARF (plain,
// zlib- and zstd-compressed), a bit-field, nested union members, and TLS
// found both by symbol and by disassembly.
func TestFakeRuby(t *testing.T) {
	for _, name := range []string{"fakeruby.so", "fakeruby-zlib.so", "fakeruby-zstd.so"} {
		t.Run(name, func(t *testing.T) {
			b, err := OpenBinary(filepath.Join("testdata", name), OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.Version != (Version{3, 3, 8}) {
				t.Errorf("version %v", b.Version)
			}
			structs, consts, _, err := b.dwarfStructs()
			if err != nil {
				t.Fatal(err)
			}
			def := structs["rb_method_definition_struct"]
			checks := map[string]Member{
				"type":               {Offset: 0, Size: 4, BitOffset: 0, BitSize: 4},
				"complemented_count": {Offset: 4, Size: 4, BitOffset: 0, BitSize: 28},
				"body.iseq.iseqptr":  {Offset: 8, Size: 8},
				"body.cfunc.func":    {Offset: 8, Size: 8},
				"body.cfunc.argc":    {Offset: 16, Size: 4},
				"original_id":        {Offset: 24, Size: 8},
			}
			for m, want := range checks {
				if got := def.Members[m]; got != want {
					t.Errorf("rb_method_definition_struct.%s = %+v, want %+v", m, got, want)
				}
			}
			if def.Size != 32 {
				t.Errorf("sizeof(rb_method_definition_struct) = %d", def.Size)
			}
			if got := structs["rb_execution_context_struct"].Members["thread_ptr"].Offset; got != 48 {
				t.Errorf("rb_execution_context_struct.thread_ptr = %d, want 48", got)
			}
			if consts["RUBY_T_STRING"] != 5 || consts["RUBY_T_MASK"] != 0x1f {
				t.Errorf("constants %v", consts)
			}
			// Far too little for a Layout: the error names what is missing.
			if _, err := b.LayoutFromDWARF(); err == nil || !strings.Contains(err.Error(), "rb_iseq_constant_body") {
				t.Errorf("LayoutFromDWARF: %v", err)
			}
			sym := b.syms["ruby_current_ec"]
			var dis Anchor
			if err := b.currentECFromCode(newELFEnv(b), &dis, nil); err != nil {
				t.Fatal(err)
			}
			if dis.TLSOffset != int64(sym.Value) || dis.TLSModuleGOT == 0 {
				t.Errorf("disassembly TLS offset %d (GOT %#x), symbol %d", dis.TLSOffset, dis.TLSModuleGOT, sym.Value)
			}
		})
	}
}

// FuzzOpenBinary feeds arbitrary bytes through everything that reads an ELF
// file: symbols, version, debug links, DWARF, tables, disassembly. It must
// return errors, never panic or run away.
func FuzzOpenBinary(f *testing.F) {
	broken, _ := filepath.Glob(filepath.Join(malformedDir, "*.so"))
	for _, seed := range append([]string{"testdata/fakeruby.so", "testdata/fakeruby-zlib.so", "testdata/fakeruby-zstd.so"}, broken...) {
		b, err := os.ReadFile(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "bin")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := OpenBinary(path, OpenOptions{Root: dir})
		if err != nil {
			return
		}
		defer b.Close()
		b.dwarfStructs()
		b.elf.readFDEEnds() // what sizes functions without .eh_frame_hdr
		l, _ := b.Layout()
		b.Anchors(l)
		var a Anchor
		b.currentECFromCode(newELFEnv(b), &a, nil)
	})
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"3.3.8", "3.4.0-preview1", "", "1.2", "99999999999999999999.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err == nil && v.String() == "" {
			t.Fatal("empty version string")
		}
	})
}
