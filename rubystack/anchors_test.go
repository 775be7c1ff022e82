package rubystack

import (
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
	full, fl := openLayout(t, testruby.Get(t, "3.3.8-static").VM)
	stripped, sl := openLayout(t, testruby.Get(t, "3.3.8-static-stripped").VM)
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
	b, l := openLayout(t, testruby.Get(t, "3.1.2-shared").VM)
	syms := b.Anchors(l)
	var ec, gs Anchor
	if err := b.currentECByDisassembly(&ec); err != nil {
		t.Fatal(err)
	}
	if err := b.globalSymbolsByDisassembly(&gs, l); err != nil {
		t.Fatal(err)
	}
	if ec.TLSOffset != syms.CurrentEC.TLSOffset || ec.TLSModuleGOT == 0 {
		t.Errorf("ruby_current_ec: disassembly TLS %#x (GOT %#x), symtab %#x", ec.TLSOffset, ec.TLSModuleGOT, syms.CurrentEC.TLSOffset)
	}
	if gs.Address != syms.GlobalSymbols.Address {
		t.Errorf("ruby_global_symbols: disassembly %#x, symtab %#x", gs.Address, syms.GlobalSymbols.Address)
	}
	var vm, exec Anchor
	if err := b.vmPtrByDisassembly(&vm, l); err != nil {
		t.Fatal(err)
	}
	if vm.Address != syms.VMPtr.Address || !strings.Contains(vm.How, "GOT") {
		t.Errorf("ruby_current_vm_ptr: disassembly %#x (%s), symtab %#x", vm.Address, vm.How, syms.VMPtr.Address)
	}
	if err := b.vmExecByDisassembly(&exec); err == nil || !strings.Contains(err.Error(), "PLT") {
		t.Errorf("rb_vm_exec through the PLT: %v %+v", err, exec)
	}
}

// TestVMPtrByDisassemblyDebian: Debian's stripped libruby exports
// ruby_current_vm_ptr, so the fallback can be checked against .dynsym.
func TestVMPtrByDisassemblyDebian(t *testing.T) {
	b, l := openLayout(t, testruby.Get(t, "3.1.2-debian").VM)
	var vm Anchor
	if err := b.vmPtrByDisassembly(&vm, l); err != nil {
		t.Fatal(err)
	}
	if s := b.syms["ruby_current_vm_ptr"]; vm.Address != s.Value {
		t.Errorf("disassembly %#x, dynsym %#x", vm.Address, s.Value)
	}
}

// TestUnsupportedRuby: a Ruby with no DWARF and no table row gets a typed
// error naming the version, what is supported, and the fix.
func TestUnsupportedRuby(t *testing.T) {
	b, err := OpenBinary(testruby.Get(t, "3.3.8-static-stripped").VM, OpenOptions{})
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
	for _, want := range []string{"9.9.9", "3.1.2/x86_64", "3.3.8/x86_64", "--debug-file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
