// Package recording runs a recording: it attaches to Ruby processes (given,
// started, or discovered), samples them with the bpf package, symbolizes each
// new Ruby frame from live memory through rubystack, and writes a perf.data
// through perfdata, with the Ruby symbol table in a private feature section
// so the file needs no live process afterwards.
//
// It owns the symbol table's on-disk format. It must not know how perf.data
// is laid out (perfdata does) or how the VM is read (rubystack does).
package recording
