// Package readback reads a recording back: ReadStacks hands on each
// sample of a perf.data as a merged stack (merge), its Ruby frames named
// by the recording's own symbol table (symtab) and its native frames
// unwound from the stack copy or the callchain and named from the files
// the process mapped (native), its kernel frames from the kernel symbols
// kept in the file, with its thread's state and request labels. Reader
// merges one sample at a time: ReadStacks reads a file through one, and a
// live recording reads its records through another as they come.
//
// It owns the private feature sections a recording adds to perf's
// (Feature*, SymbolsPath for the copy of a recording in progress) and how
// they are read back within bounds.
//
// It must not load, attach or talk to the BPF program, nor link what does
// (bpf, cilium/ebpf, recording: internal/archtest checks), so that report,
// script and convert need none of it. It must not know how perf.data is
// laid out (perfdata does), how the VM is read (rubystack does), or how
// the symbol table is kept (symtab does).
package readback
