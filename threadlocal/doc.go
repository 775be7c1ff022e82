// Package threadlocal locates thread-local variables of shared objects in a
// live glibc or musl process, for a reader that knows only a thread's
// pointer (x86_64 fs_base): a BPF program running in the context of a
// sampled thread.
//
// A variable of a dlopen'ed object (general-dynamic TLS) has no fixed offset
// from the thread pointer: glibc allocates the module's block per thread, on
// the thread's first access, and records it in the thread's dynamic thread
// vector (DTV). Find computes, once per process, what a reader needs to
// follow that path (thread pointer → DTV → the module's slot → the block →
// the variable): the module id from the dynamic linker's link_map list, and
// the layout of glibc's private structures from the descriptors glibc exports
// for debuggers (the _thread_db_* GLIBC_PRIVATE symbols libthread_db reads),
// never from hand-typed internals. musl exports no such descriptors: what
// is read of it is the part of its thread structure it declares ABI, its
// debugger's list of loaded objects, and the module ids its dynamic linker
// hands out in load order (musl.go). DTVOf says which C library a process
// has and how its DTV is laid out. Var.Address is the reference of what the
// reader does with them.
//
// Files remembers what Find read of each mapped file (its segments, its
// dynamic symbols), by the file's identity, so that a recorder looking in
// many processes that map the same libraries reads each of them once.
//
// Everything read from the target (its memory, its /proc files, the files it
// maps) is untrusted: every loop and read is bounded, and nothing panics.
//
// It must not know about Ruby, perf or BPF: it locates a symbol the caller
// names. It imports only the standard library, golang.org/x/sys, procmaps,
// debuginfo (ELF files opened within its bounds) and internal/safefile.
package threadlocal
