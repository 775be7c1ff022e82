// Package native owns native stacks: unwinding a sample's user stack copy
// with the call frame information (.eh_frame, .debug_frame) of each mapped
// ELF object, and naming native and kernel addresses (ELF symbol tables,
// kallsyms). A stripped file (no .symtab) is named from the .symtab of its
// separate debug file, which package debuginfo finds.
//
// It also compiles an object's call frame information into an unwind table
// (Table: per address range, where the CFA, the caller's frame pointer and
// return address are), the form a program that cannot interpret DWARF (the
// BPF sampler) unwinds with; WalkTable is that walk in Go, checked frame for
// frame against Unwind.
//
// It knows nothing of Ruby, perf.data or output formats: callers give it
// registers, a stack copy, mappings and kallsyms text.
package native
