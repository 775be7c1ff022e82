// Package procmaps reads a process's memory mappings (/proc/PID/maps),
// bounded, for every package that looks at a live process (rubystack's
// Ruby, threadlocal's shared objects, the recorder's synthetic MMAP2
// records). It knows nothing of Ruby, ELF, perf or BPF.
package procmaps
