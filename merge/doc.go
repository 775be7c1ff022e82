// Package merge splices Ruby frames into native callchains: each rb_vm_exec
// frame owns its FINISH-delimited group of Ruby frames, each C-method frame the
// native frames it calls. It produces one unified Stack per sample.
//
// It may import rubystack for frame types; it must not know about perf.data
// encoding or output formats.
package merge
