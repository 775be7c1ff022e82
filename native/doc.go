// Package native owns native stacks: unwinding a sample's user stack copy
// with the call frame information (.eh_frame, .debug_frame) of each mapped
// ELF object, and naming native and kernel addresses (ELF symbol tables,
// kallsyms).
//
// It knows nothing of Ruby, perf.data or output formats: callers give it
// registers, a stack copy, mappings and kallsyms text.
package native
