package rubybuild

import (
	"debug/elf"
	"errors"
	"fmt"
	"strings"

	"github.com/rubyperf/rubyperf/debuginfo"
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
	ShapeTree        Anchor // rb_shape_tree_ptr (3.3, 3.4) or rb_shape_tree (4.0+): object shapes, for class ivars
	// ShapeTreeIsStruct: ShapeTree is the rb_shape_tree struct itself (4.0+
	// exports it), not a pointer to it.
	ShapeTreeIsStruct bool
	// FrozenCore is rb_mRubyVMFrozenCore, a class the VM hides from
	// ObjectSpace (4.0 made it a T_CLASS): a heap census leaves it out of
	// the classes as Ruby does. No use requires it.
	FrozenCore Anchor

	// GCRunning is not a symbol: it says where the layout's flags.during_gc
	// came from (its source, or the disassembly of rb_during_gc for a table
	// that lacks it), or why it is missing, so that it is listed with how
	// the anchors were found. No use requires it.
	GCRunning Anchor
	// SymbolID is not a symbol either: where the layout's RSymbol.id came
	// from (its source, or the disassembly of rb_sym2id for a table that
	// lacks it), or why it is missing. No use requires it: without it a
	// dynamic Symbol (a request label's value) is not named.
	SymbolID Anchor

	// needShapeTree: the Layout keeps class ivars in object shapes, so
	// naming frames needs ShapeTree.
	needShapeTree bool
}

// List returns the anchors in a stable order.
func (a *Anchors) List() []*Anchor {
	return []*Anchor{&a.CurrentEC, &a.VMPtr, &a.SingleMainRactor, &a.GlobalSymbols, &a.VMExec, &a.VMExecCore, &a.ShapeTree,
		&a.FrozenCore, &a.GCRunning, &a.SymbolID}
}

// anchorSymbols are the symbols the binary is searched for.
var anchorSymbols = map[string]bool{
	"ruby_version": true, "ruby_current_ec": true, "ruby_current_vm_ptr": true,
	"ruby_single_main_ractor": true, "ruby_global_symbols": true, "rb_vm_exec": true,
	"vm_exec_core": true, "rb_thread_current": true, "rb_id2str": true, "rb_current_ec_noinline": true,
	// exported functions the disassembly fallbacks read
	"rb_iseq_eval": true, "rb_iseq_eval_main": true, "rb_during_gc": true,
	"rb_shape_tree_ptr": true, "rb_shape_tree": true, "rb_shape_get_shape_by_id": true, "rb_shape_id": true,
	"rb_block_given_p": true, "rb_keyword_given_p": true, "rb_errinfo": true,
	"rb_gc_count": true, "rb_gc_latest_gc_info": true, "rb_gc_get_objspace": true,
	"rb_sym_immortal_count": true, "rb_sym2id": true, "rb_mRubyVMFrozenCore": true,
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
	plain(&a.FrozenCore, "rb_mRubyVMFrozenCore")

	env := newELFEnv(b)
	a.CurrentEC.Name = "ruby_current_ec"
	if s, ok := b.syms["ruby_current_ec"]; ok && s.Type == elf.STT_TLS {
		a.CurrentEC = Anchor{Name: s.Name, Found: true, Size: s.Size, TLSOffset: int64(s.Value), How: string(s.From)}
		a.CurrentEC.TLSModuleGOT = b.tlsModuleGOT()
		if b.isExecutable() {
			if tlsBlock, ok := b.execTLSBlockSize(); ok {
				a.CurrentEC.TPOffset, a.CurrentEC.HasTPOffset = int64(s.Value)-tlsBlock, true
			}
		}
	} else if err := b.currentECFromCode(env, &a.CurrentEC, l); err != nil {
		a.CurrentEC.Why = err.Error()
	}
	const noLayout = "no symbol, and the disassembly fallback needs the struct layout to check what it finds"
	if !a.GlobalSymbols.Found {
		a.GlobalSymbols.Why = noLayout
		if l != nil {
			if err := b.globalSymbolsFromCode(env, &a.GlobalSymbols, l); err != nil {
				a.GlobalSymbols.Why = err.Error()
			}
		}
	}
	if !a.VMPtr.Found {
		a.VMPtr.Why = noLayout
		if l != nil {
			if err := b.vmPtrFromCode(env, &a.VMPtr, l); err != nil {
				a.VMPtr.Why = err.Error()
			}
		}
	}
	// The shape tree is needed where class ivars live in shapes, except 3.2
	// (the shape list is in the VM). 3.3 and 3.4 point at it from
	// rb_shape_tree_ptr; 4.0+ exports the struct itself, rb_shape_tree.
	tree, treeStruct := b.syms[shapeTreeStructSymbol]
	treeStruct = treeStruct && tree.Value != 0
	a.needShapeTree = l != nil && l.Capabilities.ClassIvarsInShapes && !l.Capabilities.ShapeListInVM
	switch {
	case a.ShapeTree.Found:
	case treeStruct:
		a.ShapeTree = Anchor{Name: tree.Name, Found: true, Address: tree.Value, Size: tree.Size, How: string(tree.From)}
		a.ShapeTreeIsStruct = true
	case l == nil:
		a.ShapeTree.Why = noLayout
	case !l.Capabilities.ClassIvarsInShapes:
		a.ShapeTree.Why = "not used by this Ruby (no object shapes for class ivars)"
	case l.Capabilities.ShapeListInVM:
		a.ShapeTree.Why = "not used by this Ruby (the shape list is in the VM)"
	default:
		if err := b.shapeTreeFromCode(env, &a.ShapeTree, l); err != nil {
			a.ShapeTree.Why = err.Error()
		}
	}
	if !a.VMExec.Found {
		if err := b.vmExecByDisassembly(&a.VMExec); err != nil {
			a.VMExec.Why = err.Error()
		}
	}
	a.GCRunning = gcRunningAnchor(l)
	a.SymbolID = symbolIDAnchor(l)
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
	if err := debuginfo.Guard(func() error {
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

// Use is what a caller wants to do with a Ruby process; uses combine with |.
type Use uint8

const (
	// UseSnapshot reads every thread's stack through the VM and names frames.
	UseSnapshot Use = 1 << iota
	// UseRecord samples each thread's running EC (TLS) and names frames.
	UseRecord
)

func (u Use) String() string {
	var s []string
	if u&UseSnapshot != 0 {
		s = append(s, "snapshot")
	}
	if u&UseRecord != 0 {
		s = append(s, "record")
	}
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, " or ")
}

// Required returns the anchors use needs, in List order:
//
//	record:   ruby_current_ec (the BPF program reads each thread's EC)
//	snapshot: ruby_current_vm_ptr (the thread list)
//	both:     ruby_global_symbols (C method names), and on 3.3 and 3.4
//	          rb_shape_tree_ptr (class ivars through object shapes: class paths)
//
// rb_vm_exec, vm_exec_core and ruby_single_main_ractor are optional: without
// rb_vm_exec, Ruby frames are not spliced into native stacks.
func (a *Anchors) Required(use Use) []*Anchor {
	var out []*Anchor
	for _, x := range a.List() {
		need := false
		switch x {
		case &a.CurrentEC:
			need = use&UseRecord != 0
		case &a.VMPtr:
			need = use&UseSnapshot != 0
		case &a.GlobalSymbols:
			need = use != 0
		case &a.ShapeTree:
			need = use != 0 && a.needShapeTree
		}
		if need {
			out = append(out, x)
		}
	}
	return out
}

// Usable returns nil when every anchor use needs was found, else a
// *MissingAnchorsError naming what is missing and how it was searched.
func (a *Anchors) Usable(use Use) error {
	var missing []Anchor
	for _, x := range a.Required(use) {
		if !x.Found {
			missing = append(missing, *x)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &MissingAnchorsError{Use: use, Missing: missing}
}

// ErrMissingAnchors is matched by errors.Is for a *MissingAnchorsError.
var ErrMissingAnchors = errors.New("ruby build lacks anchors the profiler needs")

// MissingAnchorsError says a Ruby build cannot be profiled: anchors it needs
// were found neither in its symbols nor by disassembly.
type MissingAnchorsError struct {
	Use     Use
	Missing []Anchor // each with Why
}

func (e *MissingAnchorsError) Error() string {
	parts := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		parts[i] = m.Name + " not found: " + m.Why
	}
	return "cannot " + e.Use.String() + " this Ruby: " + strings.Join(parts, "; ")
}

func (e *MissingAnchorsError) Is(target error) bool { return target == ErrMissingAnchors }
