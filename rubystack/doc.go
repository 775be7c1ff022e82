// Package rubystack reads the Ruby VM of a live process from outside: it
// finds the build a process runs (through rubybuild), checks that build's
// Layout against the live VM before trusting it, locates every thread and
// its execution context, walks control frames, and symbolizes them (labels,
// paths, lines, class paths) with caches that survive GC compaction. It also
// saves and replays memory snapshots, so walks can be tested without a Ruby.
// It reads the GC's progress (GCStamp) and an object's generation (Old), by
// which a caller tells how long what it read at an address holds; what a
// heap slot holds now, with its age and mark bit (ReadSlot); a census of
// the whole live heap, page by page, with the bytes beyond the slots that
// ObjectSpace.memsize_of counts for strings, arrays, hashes and objects
// (HeapCensus); and the same walk written as ObjectSpace.dump_all's JSON
// lines (DumpHeap): the one output format it writes, because it is the
// heap's own.
//
// Everything it reads from a target is untrusted: every read, loop and
// allocation is bounded, and a read that tears is retried or reported.
//
// It must not know about ELF, DWARF, tables or disassembly (rubybuild's
// trade), nor about perf, eBPF, or profile formats. It imports only the
// standard library, golang.org/x/sys, rubybuild, procmaps and threadlocal
// (how the process's C library lays out thread-local storage).
package rubystack
