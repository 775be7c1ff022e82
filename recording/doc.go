// Package recording runs a recording: it attaches to Ruby processes (given,
// started, or discovered), samples them with the bpf package, symbolizes each
// new Ruby frame from live memory through rubystack, and writes a perf.data
// through perfdata, with the Ruby symbol table in a private feature section
// so the file needs no live process afterwards. It follows what targets do
// while recorded: an exec ends the image (a Ruby is attached again as a new
// generation, bpf.Payload.Gen), a fork may add a target, an exit ends one.
//
// It owns the symbol table's on-disk format. It must not know how perf.data
// is laid out (perfdata does) or how the VM is read (rubystack does).
package recording
