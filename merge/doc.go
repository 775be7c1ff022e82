// Package merge splices Ruby frames into native callchains: each rb_vm_exec
// frame owns its FINISH-delimited group of Ruby frames, each C-method frame the
// native frames it calls. It produces one unified Stack per sample, in one of
// three views (View): the default that reads like the Ruby program (the
// interpreter's own frames between Ruby frames folded), every native frame,
// or Ruby frames alone; and it labels a stack whose native unwinding stopped
// short of what its view shows (IncompleteName).
//
// It may import rubystack for frame types; it must not know about perf.data
// encoding or output formats.
package merge
