// Package bpf owns the eBPF program that samples Ruby stacks (its C source,
// the bpf2go output committed beside it), loading it, its maps (which
// processes are targets, with what ProcessConfig; which frames user space
// has named, MarkNamed), perf_event setup per CPU, the uprobes that sample
// allocations at the refills of a target's allocation cache (Refills,
// armed and disarmed in windows by the recorder), and reading the rings it
// writes. The perf records around each sample are laid out as OutputFormat
// says, and decoded by their reader (perfdata); the Ruby payload inside
// them, and the other records the program writes, are payload's to decode,
// so that reading a recording needs no cilium/ebpf.
//
// It takes a rubybuild.Layout and converts it to the program's configuration;
// it must not know about output formats or perf.data encoding.
package bpf
