package rubybuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// anchorLayout is the part of a Layout the disassembly fallbacks check
// against, per minor version (x86_64): ec->thread_ptr and ec->cfp,
// vm->objspace (3.4: vm->gc.objspace), rb_symbols_t and rb_shape_tree_t.
func anchorLayout(version string) *Layout {
	l := &Layout{}
	l.ExecutionContext.ThreadPtr, l.ExecutionContext.CFP = 48, 16
	l.Symbols.LastID, l.Symbols.NextID, l.Symbols.IDs = 0, -1, 16
	l.Shape.TreeShapeList = -1
	switch version[:3] {
	case "3.1":
		l.VM.ObjSpace = 1104
		if version == "3.1.7" {
			l.VM.ObjSpace = 1112 // rb_vm_struct grew in 3.1.7 (rb_during_gc reads 0x458)
		}
	case "3.3":
		l.VM.ObjSpace = 1304
		l.Shape.TreeShapeList, l.Capabilities.ClassIvarsInShapes = 0, true
	case "3.4":
		l.VM.ObjSpace = 1296
		l.Shape.TreeShapeList, l.Capabilities.ClassIvarsInShapes = 0, true
	default:
		return nil
	}
	return l
}

// debianLibrubies are Debian's libruby packages unpacked (dpkg -x) under
// $RUBYPERF_DEBIAN_DEBS/VERSION: a developer's analysis aid, skipped when unset.
func debianLibrubies(t *testing.T) map[string]string {
	dir := os.Getenv("RUBYPERF_DEBIAN_DEBS")
	if dir == "" {
		t.Skip("RUBYPERF_DEBIAN_DEBS is not set")
	}
	out := map[string]string{}
	for _, v := range []string{"3.1.2", "3.1.7", "3.3.8", "3.3.14", "3.4.11"} {
		m, _ := filepath.Glob(filepath.Join(dir, v, "usr/lib/x86_64-linux-gnu/libruby-*.so.*.*.*"))
		if len(m) == 1 {
			out[v] = m[0]
		}
	}
	return out
}

func TestAnchorsDebianPackages(t *testing.T) {
	for v, path := range debianLibrubies(t) {
		t.Run(v, func(t *testing.T) {
			b, err := OpenBinary(path, OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			l := anchorLayout(v)
			a := b.Anchors(l)
			for _, x := range a.List() {
				t.Logf("%-24s found=%v addr=%#x tls=%#x got=%#x how=%q why=%q", x.Name, x.Found, x.Address, x.TLSOffset, x.TLSModuleGOT, x.How, x.Why)
			}
			if err := a.Usable(UseRecord | UseSnapshot); err != nil {
				t.Error(err)
			}
			// 3.1 exports them: the fallbacks must agree with .dynsym.
			if strings.HasPrefix(v, "3.1") {
				env := newELFEnv(b)
				var ec, vm, gs Anchor
				if err := b.currentECFromCode(env, &ec, l); err != nil || ec.TLSOffset != a.CurrentEC.TLSOffset {
					t.Errorf("ruby_current_ec by disassembly: %v %+v, dynsym %#x", err, ec, a.CurrentEC.TLSOffset)
				}
				if err := b.vmPtrFromCode(env, &vm, l); err != nil || vm.Address != a.VMPtr.Address {
					t.Errorf("ruby_current_vm_ptr by disassembly: %v %+v, dynsym %#x", err, vm, a.VMPtr.Address)
				}
				if err := b.globalSymbolsFromCode(env, &gs, l); err != nil || gs.Address != a.GlobalSymbols.Address {
					t.Errorf("ruby_global_symbols: %v %+v", err, gs)
				}
			}
		})
	}
}
