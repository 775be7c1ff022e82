// Package recording runs a recording: it attaches to Ruby processes (given,
// started, or discovered), samples them with the bpf package, decodes what
// the program writes with payload, names each new Ruby frame from live
// memory into a symtab.Table, and writes a perf.data
// through perfdata, with the Ruby symbol table in a private feature section
// (readback.FeatureRubySymbols) so the file needs no live process
// afterwards; readback reads it back. A live recording merges each sample
// as it is read, through a readback.Reader. It follows what targets do
// while recorded: an exec ends the image (a Ruby is attached again as a new
// generation, payload.Payload.Gen), a fork may add a target, an exit ends one.
// With Options.Alloc it also samples allocations: it finds each target's
// allocation-cache refills (rubybuild's RefillSites) and arms their uprobes
// in windows that keep the traps within a budget (alloc.go); it holds each
// window's samples until the window ends and weighs them by what it stands
// for, the traps' stalls taken out, their cost fitted to Ruby's own count of
// allocations (allocweight.go, alloctrap.go); then until the program tells
// what each sample's slot held a page of allocations later, to name the
// object's class (allocclass.go). With Options.Live it follows each
// sample's object until it dies, and writes which were alive at the end
// (alloclive.go).
//
// A frame is keyed by the addresses the program copied, and the GC frees
// code and reuses its memory while recording. So a name read from memory
// holds only for the samples it can be proven right for (a payload.Span of
// GC intervals: payload.GCStamp): those of the GC interval it was read in,
// when a sample of that interval ran the code, and, for code in the old generation,
// every later sample until the next major GC. A frame no name holds for
// reads as symtab.ReplacedLabel, never as the code that was there before.
// The proofs, and the table's on-disk format, are symtab's; the recorder
// decides when to read (the GC stamps before and after), and splits the
// memory budget.
//
// It must not know how perf.data is laid out (perfdata does), how the VM
// is read (rubystack does), how the symbol table is kept (symtab does), or
// how a sample is merged into a stack (readback and merge do).
package recording
