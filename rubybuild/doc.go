// Package rubybuild owns what can be known about a CRuby build from its
// files, without running it: which ELF holds the VM (a ruby executable or a
// libruby), its version and arch, the struct Layout of its VM (from DWARF
// first, then from built-in tables generated from DWARF by `rubyperf
// offsets`, completed where a table predates a member the binary's own code
// shows: flags.during_gc from rb_during_gc, RSymbol.id from rb_sym2id), and
// the Anchors through which a process's VM is reached (ruby_current_ec,
// ruby_current_vm_ptr, ruby_global_symbols, rb_vm_exec, the shape tree), each
// with how it was found: symbol tables, a debug file, or disassembly of the
// exported functions that use it.
//
// A Cache shared by the Binaries a recorder opens serves the Layout and
// Anchors of a build already worked out (found by the identity of its
// files, not by name or build-id), so that each new process of a fleet of
// one Ruby costs its live checks, not another DWARF read or disassembly.
//
// Separate debug files are found through package debuginfo (build-id,
// .gnu_debuglink, --debug-file, debuginfod); rubybuild says which file it
// wants them for and reads their DWARF and symbols.
//
// It must not know about processes, target memory, perf, eBPF or output
// formats: rubystack reads a live VM with what rubybuild finds. It imports
// only the standard library, golang.org/x (sys, arch), debuginfo and
// internal/safefile.
package rubybuild
