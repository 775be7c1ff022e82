// Package rubystack owns all knowledge of CRuby: finding Ruby in a process or
// a file, its version and arch, the struct Layout of its VM (from DWARF first,
// from built-in tables generated from DWARF second), and the anchors through
// which the VM is reached (the thread-local ruby_current_ec, the VM pointer,
// the global symbol table, rb_vm_exec), each with how it was found.
//
// Later it also owns locating every thread's execution context, the reference
// stack walk, and symbolization of frames.
//
// Separate debug files are found through package debuginfo (build-id,
// .gnu_debuglink, --debug-file, debuginfod); rubystack only says which file
// it wants them for and reads their DWARF and symbols.
//
// It must not know about perf, eBPF, or output formats. It imports only the
// standard library, golang.org/x (sys, arch), and debuginfo.
package rubystack
