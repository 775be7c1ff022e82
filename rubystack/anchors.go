package rubystack

import (
	"debug/elf"
	"fmt"
)

// Anchor is a symbol the profiler needs, with how it was found.
type Anchor struct {
	Name  string
	Found bool
	// Address is the unrelocated virtual address in the file (add the load
	// bias for a process). For TLS variables it is 0.
	Address uint64
	Size    uint64
	// For thread-local variables: TLSOffset is the offset inside the module's
	// TLS block (st_value). TPOffset is the offset from the thread pointer,
	// known without a process only for an executable (local-exec TLS).
	TLSOffset   int64
	TPOffset    int64
	HasTPOffset bool
	// TLSModuleGOT is the address of a GOT slot that the dynamic linker fills
	// with this module's TLS module id (R_X86_64_DTPMOD64); 0 if none.
	TLSModuleGOT uint64
	How          string
	Why          string // when not found: what was tried
}

// Anchors are the process-wide entry points into the VM.
type Anchors struct {
	CurrentEC        Anchor // ruby_current_ec: the running EC of each native thread (TLS, 3.0+)
	VMPtr            Anchor // ruby_current_vm_ptr: the VM, and through it every thread
	SingleMainRactor Anchor // ruby_single_main_ractor
	GlobalSymbols    Anchor // ruby_global_symbols: id2str for cfunc names
	VMExec           Anchor // rb_vm_exec: one native frame per VM entry
	VMExecCore       Anchor // vm_exec_core, where not inlined
	ShapeTree        Anchor // rb_shape_tree_ptr: object shapes (3.3+), for class ivars
}

// List returns the anchors in a stable order.
func (a *Anchors) List() []*Anchor {
	return []*Anchor{&a.CurrentEC, &a.VMPtr, &a.SingleMainRactor, &a.GlobalSymbols, &a.VMExec, &a.VMExecCore, &a.ShapeTree}
}

// anchorSymbols are the symbols the binary is searched for.
var anchorSymbols = map[string]bool{
	"ruby_version": true, "ruby_current_ec": true, "ruby_current_vm_ptr": true,
	"ruby_single_main_ractor": true, "ruby_global_symbols": true, "rb_vm_exec": true,
	"vm_exec_core": true, "rb_thread_current": true, "rb_id2str": true, "rb_current_ec_noinline": true,
	// exported functions the disassembly fallbacks read
	"rb_iseq_eval": true, "rb_iseq_eval_main": true, "rb_during_gc": true,
	"rb_shape_tree_ptr": true, "rb_shape_get_shape_by_id": true,
}

// findAnchors locates each anchor: from symbols first (dynsym, symtab, a debug
// file's symtab), then by disassembling exported functions whose code names
// the hidden variable (stripped 3.3+ builds export none of them).
func (b *Binary) findAnchors(l *Layout) Anchors {
	var a Anchors
	plain := func(dst *Anchor, name string) {
		dst.Name = name
		if s, ok := b.syms[name]; ok {
			*dst = Anchor{Name: name, Found: true, Address: s.Value, Size: s.Size, How: string(s.From)}
		}
	}
	plain(&a.VMPtr, "ruby_current_vm_ptr")
	plain(&a.SingleMainRactor, "ruby_single_main_ractor")
	plain(&a.GlobalSymbols, "ruby_global_symbols")
	plain(&a.VMExec, "rb_vm_exec")
	plain(&a.VMExecCore, "vm_exec_core")
	plain(&a.ShapeTree, "rb_shape_tree_ptr")

	a.CurrentEC.Name = "ruby_current_ec"
	if s, ok := b.syms["ruby_current_ec"]; ok && s.Type == elf.STT_TLS {
		a.CurrentEC = Anchor{Name: s.Name, Found: true, Size: s.Size, TLSOffset: int64(s.Value), How: string(s.From)}
		a.CurrentEC.TLSModuleGOT = b.tlsModuleGOT()
		if b.isExecutable() {
			if tlsBlock, ok := b.execTLSBlockSize(); ok {
				a.CurrentEC.TPOffset, a.CurrentEC.HasTPOffset = int64(s.Value)-tlsBlock, true
			}
		}
	} else if err := b.currentECByDisassembly(&a.CurrentEC); err != nil {
		a.CurrentEC.Why = err.Error()
	}
	if !a.GlobalSymbols.Found && l != nil {
		if err := b.globalSymbolsByDisassembly(&a.GlobalSymbols, l); err != nil {
			a.GlobalSymbols.Why = err.Error()
		}
	}
	if !a.VMPtr.Found && l != nil {
		if err := b.vmPtrByDisassembly(&a.VMPtr, l); err != nil {
			a.VMPtr.Why = err.Error()
		}
	}
	if !a.ShapeTree.Found && l != nil && l.Capabilities.ClassIvarsInShapes {
		if err := b.shapeTreeByDisassembly(&a.ShapeTree, l); err != nil {
			a.ShapeTree.Why = err.Error()
		}
	}
	if l != nil && !l.Capabilities.ClassIvarsInShapes && !a.ShapeTree.Found {
		a.ShapeTree.Why = "not used by this Ruby (no object shapes for class ivars)"
	}
	if !a.VMExec.Found {
		if err := b.vmExecByDisassembly(&a.VMExec); err != nil {
			a.VMExec.Why = err.Error()
		}
	}
	for _, x := range a.List() {
		if !x.Found && x.Why == "" {
			x.Why = "not in .dynsym" + map[bool]string{true: " or .symtab", false: "; no .symtab"}[b.elf.hasSymtab() || b.debug != nil]
		}
	}
	return a
}

// isExecutable says whether the file is a program rather than a shared
// library: its TLS block is then the first, at a link-time offset from TP.
func (b *Binary) isExecutable() bool {
	if b.elf.f.Type == elf.ET_EXEC {
		return true
	}
	for _, p := range b.elf.f.Progs {
		if p.Type == elf.PT_INTERP {
			return true // a PIE executable
		}
	}
	return false
}

// execTLSBlockSize is l_tls_offset of an executable on x86_64 (TLS variant
// II): the TLS block ends at TP, so a variable lives at TP - size + st_value.
func (b *Binary) execTLSBlockSize() (int64, bool) {
	p := b.elf.tlsSegment()
	if p == nil || b.elf.f.Machine != elf.EM_X86_64 {
		return 0, false
	}
	align := p.Align
	if align == 0 {
		align = 1
	}
	return int64((p.Memsz + align - 1) &^ (align - 1)), true
}

// tlsModuleGOT returns a GOT slot holding this module's TLS module id.
func (b *Binary) tlsModuleGOT() uint64 {
	for _, r := range b.relocations() {
		if r.typ == uint32(elf.R_X86_64_DTPMOD64) {
			return r.off
		}
	}
	return 0
}

type relocation struct {
	off    uint64
	typ    uint32
	sym    uint32
	addend int64
}

// maxRelocations bounds .rela.dyn; libruby has ~10k entries.
const maxRelocations = 1 << 20

// relocations reads .rela.dyn (x86_64 Elf64_Rela entries).
func (b *Binary) relocations() []relocation {
	if b.relocs != nil {
		return b.relocs
	}
	b.relocs = []relocation{}
	s := b.elf.f.Section(".rela.dyn")
	if s == nil || s.Size/24 > maxRelocations {
		return b.relocs
	}
	data, err := b.elf.sectionData(s)
	if err != nil {
		return b.relocs
	}
	for i := 0; i+24 <= len(data); i += 24 {
		info := le64(data[i+8:])
		b.relocs = append(b.relocs, relocation{
			off: le64(data[i:]), typ: uint32(info), sym: uint32(info >> 32), addend: int64(le64(data[i+16:])),
		})
	}
	return b.relocs
}

func (b *Binary) relocationAt(off uint64) (relocation, bool) {
	for _, r := range b.relocations() {
		if r.off == off {
			return r, true
		}
	}
	return relocation{}, false
}

// dynsymValue returns st_value of dynamic symbol index i.
func (b *Binary) dynsymValue(i uint32) (uint64, bool) {
	var syms []elf.Symbol
	if err := guard(func() error {
		var err error
		syms, err = b.elf.f.DynamicSymbols()
		return err
	}); err != nil || i == 0 || int(i) > len(syms) {
		return 0, false
	}
	return syms[i-1].Value, true // DynamicSymbols drops the null symbol 0
}

func (b *Binary) funcBytes(name string, max int) (uint64, []byte, error) {
	s, ok := b.syms[name]
	if !ok {
		return 0, nil, fmt.Errorf("%s is not exported", name)
	}
	n := int(s.Size)
	if n == 0 || n > max {
		n = max
	}
	code, err := b.elf.readVaddr(s.Value, n)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", name, err)
	}
	return s.Value, code, nil
}
