//go:build debs

package rubybuild

// A developer's analysis aid, built with the tag debs: the anchors found in
// Debian's libruby packages, unpacked by hand (their old patch versions are
// no longer served), checked against what each version exports.
//
//	RUBYPERF_DEBIAN_DEBS=DIR go test -tags debs -run TestAnchorsDebianPackages ./rubybuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// debianLibrubies are Debian's libruby packages unpacked (dpkg -x) under
// $RUBYPERF_DEBIAN_DEBS/VERSION.
func debianLibrubies(t *testing.T) map[string]string {
	dir := os.Getenv("RUBYPERF_DEBIAN_DEBS")
	if dir == "" {
		t.Fatal("RUBYPERF_DEBIAN_DEBS is not set: unpack Debian's libruby packages (dpkg -x) under $RUBYPERF_DEBIAN_DEBS/VERSION")
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
