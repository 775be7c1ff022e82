package rubybuild

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

func openLayout(t *testing.T, path string) (*Binary, *Layout) {
	t.Helper()
	b, err := OpenBinary(path, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := b.Layout()
	if err != nil {
		t.Fatal(err)
	}
	return b, l
}

// TestStrippedAnchorsEqualSymtab: on the stripped 3.3.8 copy, the TLS offset
// of ruby_current_ec and the global symbol table are found without .symtab and
// equal what .symtab says in the unstripped build.
func TestStrippedAnchorsEqualSymtab(t *testing.T) {
	full, fl := openLayout(t, testruby.Get(t, "source-3.3-static").VM)
	stripped, sl := openLayout(t, testruby.Get(t, "source-3.3-static-stripped").VM)
	if stripped.elf.hasSymtab() {
		t.Fatal("the stripped copy has a .symtab")
	}
	if !strings.HasPrefix(sl.Source, "table:") {
		t.Errorf("stripped layout source = %q, want the built-in table", sl.Source)
	}
	want, got := full.Anchors(fl), stripped.Anchors(sl)
	if want.CurrentEC.How != "symtab" || want.GlobalSymbols.How != "symtab" {
		t.Fatalf("unstripped build: anchors not from symtab: %+v", want)
	}
	for _, a := range []*Anchor{&got.CurrentEC, &got.GlobalSymbols, &got.VMPtr, &got.VMExec} {
		if !a.Found || !strings.HasPrefix(a.How, "disassembly") {
			t.Errorf("stripped %s: found=%v how=%q why=%q, want found by disassembly", a.Name, a.Found, a.How, a.Why)
		}
	}
	if got.CurrentEC.TLSOffset != want.CurrentEC.TLSOffset || got.CurrentEC.TPOffset != want.CurrentEC.TPOffset ||
		!got.CurrentEC.HasTPOffset {
		t.Errorf("ruby_current_ec: stripped TLS %#x TP %d, symtab TLS %#x TP %d",
			got.CurrentEC.TLSOffset, got.CurrentEC.TPOffset, want.CurrentEC.TLSOffset, want.CurrentEC.TPOffset)
	}
	if got.GlobalSymbols.Address != want.GlobalSymbols.Address {
		t.Errorf("ruby_global_symbols: stripped %#x, symtab %#x", got.GlobalSymbols.Address, want.GlobalSymbols.Address)
	}
	if got.VMPtr.Address != want.VMPtr.Address {
		t.Errorf("ruby_current_vm_ptr: stripped %#x, symtab %#x", got.VMPtr.Address, want.VMPtr.Address)
	}
	// rb_vm_exec's size comes from the next FDE: at least the symbol's size,
	// at most alignment padding more.
	if got.VMExec.Address != want.VMExec.Address || got.VMExec.Size < want.VMExec.Size || got.VMExec.Size > want.VMExec.Size+64 {
		t.Errorf("rb_vm_exec: stripped %#x+%d, symtab %#x+%d", got.VMExec.Address, got.VMExec.Size, want.VMExec.Address, want.VMExec.Size)
	}
}

// TestDisassemblyOnSharedLibruby runs the disassembly fallbacks on a shared
// libruby (general-dynamic TLS, a tail call in rb_id2str) that also has a
// .symtab, and compares.
func TestDisassemblyOnSharedLibruby(t *testing.T) {
	b, l := openLayout(t, testruby.Get(t, "source-3.1-shared").VM)
	syms := b.Anchors(l)
	var ec, gs Anchor
	if err := b.currentECFromCode(newELFEnv(b), &ec, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.globalSymbolsFromCode(newELFEnv(b), &gs, l); err != nil {
		t.Fatal(err)
	}
	if ec.TLSOffset != syms.CurrentEC.TLSOffset || ec.TLSModuleGOT == 0 {
		t.Errorf("ruby_current_ec: disassembly TLS %#x (GOT %#x), symtab %#x", ec.TLSOffset, ec.TLSModuleGOT, syms.CurrentEC.TLSOffset)
	}
	if gs.Address != syms.GlobalSymbols.Address {
		t.Errorf("ruby_global_symbols: disassembly %#x, symtab %#x", gs.Address, syms.GlobalSymbols.Address)
	}
	var vm, exec Anchor
	if err := b.vmPtrFromCode(newELFEnv(b), &vm, l); err != nil {
		t.Fatal(err)
	}
	if vm.Address != syms.VMPtr.Address {
		t.Errorf("ruby_current_vm_ptr: disassembly %#x (%s), symtab %#x", vm.Address, vm.How, syms.VMPtr.Address)
	}
	if err := b.vmExecByDisassembly(&exec); err == nil || !strings.Contains(err.Error(), "PLT") {
		t.Errorf("rb_vm_exec through the PLT: %v %+v", err, exec)
	}
}

// TestVMPtrByDisassemblyDebian: Debian's stripped libruby exports
// ruby_current_vm_ptr, so the fallback can be checked against .dynsym.
func TestVMPtrByDisassemblyDebian(t *testing.T) {
	b, l := openLayout(t, testruby.Get(t, "debian-3.1").VM)
	var vm Anchor
	if err := b.vmPtrFromCode(newELFEnv(b), &vm, l); err != nil {
		t.Fatal(err)
	}
	if s := b.syms["ruby_current_vm_ptr"]; vm.Address != s.Value {
		t.Errorf("disassembly %#x, dynsym %#x", vm.Address, s.Value)
	}
}

// TestUnsupportedRuby: a Ruby with no DWARF and no table row gets a typed
// error naming the version, what is supported, and the fix.
func TestUnsupportedRuby(t *testing.T) {
	b, err := OpenBinary(testruby.Get(t, "source-3.3-static-stripped").VM, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Version = Version{9, 9, 9} // as if a release newer than the tables
	_, err = b.Layout()
	var ue *UnsupportedError
	if !errorsAs(err, &ue) {
		t.Fatalf("err = %v, want *UnsupportedError", err)
	}
	for _, want := range []string{"9.9.9", "no built-in table for Ruby 9.9/x86_64", "--debug-file", "DEBUGINFOD_URLS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestStrippedCETAnchorsEqualSymtab: Debian's ruby3.3 source built with
// Debian's compiler flags (-fcf-protection: endbr64 everywhere, -fPIC,
// --enable-shared), its libruby stripped like Debian's: every anchor the
// disassembly finds equals the unstripped build's .symtab.
func TestStrippedCETAnchorsEqualSymtab(t *testing.T) {
	full, fl := openLayout(t, testruby.Get(t, "source-3.3-cet").VM)
	stripped, err := OpenBinary(testruby.Get(t, "source-3.3-cet-stripped").VM, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer stripped.Close()
	if stripped.elf.hasSymtab() || !full.elf.hasSymtab() {
		t.Fatal("want an unstripped and a stripped libruby")
	}
	// The same build: the unstripped DWARF's layout is the stripped copy's.
	want, got := full.Anchors(fl), stripped.Anchors(fl)
	if err := got.Usable(UseRecord | UseSnapshot); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want *Anchor }{{&got.CurrentEC, &want.CurrentEC}, {&got.VMPtr, &want.VMPtr},
		{&got.GlobalSymbols, &want.GlobalSymbols}, {&got.ShapeTree, &want.ShapeTree}, {&got.VMExec, &want.VMExec}} {
		if c.want.How != "symtab" {
			t.Errorf("unstripped %s: %q, want from symtab", c.want.Name, c.want.How)
		}
		if !strings.HasPrefix(c.got.How, "disassembly") {
			t.Errorf("stripped %s: how=%q why=%q, want found by disassembly", c.got.Name, c.got.How, c.got.Why)
		}
		if c.got.Address != c.want.Address || c.got.TLSOffset != c.want.TLSOffset {
			t.Errorf("%s: stripped %#x (TLS %#x), symtab %#x (TLS %#x)", c.got.Name, c.got.Address, c.got.TLSOffset,
				c.want.Address, c.want.TLSOffset)
		}
	}
	if got.CurrentEC.TLSModuleGOT == 0 {
		t.Error("ruby_current_ec: no module id GOT slot")
	}
}

func TestAnchorsUsable(t *testing.T) {
	a := Anchors{
		CurrentEC:     Anchor{Name: "ruby_current_ec", Why: "no symbol; disassembly of rb_thread_current found nothing"},
		VMPtr:         Anchor{Name: "ruby_current_vm_ptr", Found: true},
		GlobalSymbols: Anchor{Name: "ruby_global_symbols", Found: true},
		ShapeTree:     Anchor{Name: "rb_shape_tree_ptr", Why: "no symbol"},
		VMExec:        Anchor{Name: "rb_vm_exec", Why: "optional"},
	}
	if err := a.Usable(UseSnapshot); err != nil {
		t.Errorf("snapshot without shapes: %v", err)
	}
	err := a.Usable(UseRecord | UseSnapshot)
	if !errors.Is(err, ErrMissingAnchors) || err.Error() !=
		"cannot snapshot or record this Ruby: ruby_current_ec not found: no symbol; disassembly of rb_thread_current found nothing" {
		t.Errorf("err = %v", err)
	}
	a.needShapeTree = true
	var me *MissingAnchorsError
	if err := a.Usable(UseSnapshot); !errors.As(err, &me) || len(me.Missing) != 1 || me.Missing[0].Name != "rb_shape_tree_ptr" {
		t.Errorf("snapshot with shapes: %v", err)
	}
}

// TestStrippedMuslAnchorsEqualSymtab: the musl Ruby's libruby, linked by
// Debian's musl-gcc without .eh_frame_hdr, stripped here: the anchors a
// stripped Alpine-shaped libruby is read by are found by disassembly and
// equal .symtab's, rb_vm_exec's size from its FDE in .eh_frame (without
// it, no interpreter frame is told apart and every native stack reads as
// cut short).
func TestStrippedMuslAnchorsEqualSymtab(t *testing.T) {
	r := testruby.Get(t, "source-3.3-musl")
	stripped := filepath.Join(t.TempDir(), filepath.Base(r.VM))
	if out, err := exec.Command("strip", "--strip-all", "-o", stripped, r.VM).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v: %s", err, out)
	}
	full, fl := openLayout(t, r.VM)
	sb, sl := openLayout(t, stripped)
	if sb.elf.f.Section(".eh_frame_hdr") != nil {
		t.Logf("%s has .eh_frame_hdr: its FDEs are not what sizes rb_vm_exec here", r.VM)
	}
	want, got := full.Anchors(fl), sb.Anchors(sl)
	// The module id's GOT slot may be another of the same module's (each
	// general-dynamic access site may have its own).
	if got.CurrentEC.TLSOffset != want.CurrentEC.TLSOffset || got.CurrentEC.TLSModuleGOT == 0 {
		t.Errorf("ruby_current_ec: stripped TLS %#x (GOT %#x), symtab %#x (GOT %#x)",
			got.CurrentEC.TLSOffset, got.CurrentEC.TLSModuleGOT, want.CurrentEC.TLSOffset, want.CurrentEC.TLSModuleGOT)
	}
	if got.VMPtr.Address != want.VMPtr.Address || got.GlobalSymbols.Address != want.GlobalSymbols.Address {
		t.Errorf("ruby_current_vm_ptr %#x, ruby_global_symbols %#x; symtab %#x, %#x",
			got.VMPtr.Address, got.GlobalSymbols.Address, want.VMPtr.Address, want.GlobalSymbols.Address)
	}
	if !strings.HasPrefix(got.VMExec.How, "disassembly") || got.VMExec.Address != want.VMExec.Address ||
		got.VMExec.Size < want.VMExec.Size || got.VMExec.Size > want.VMExec.Size+64 {
		t.Errorf("rb_vm_exec: stripped %#x+%d (%s), symtab %#x+%d", got.VMExec.Address, got.VMExec.Size, got.VMExec.How, want.VMExec.Address, want.VMExec.Size)
	}
}
