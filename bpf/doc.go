// Package bpf owns the eBPF program that samples Ruby stacks (its C source,
// the bpf2go output committed beside it), perf_event setup per CPU, and
// reading the records it writes.
//
// It takes a rubybuild.Layout and converts it to the program's configuration;
// it must not know about output formats or perf.data encoding.
package bpf
