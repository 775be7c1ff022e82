// Package bpf owns the eBPF program that samples Ruby stacks (its C source,
// the bpf2go output committed beside it), perf_event setup per CPU, reading
// the rings it writes, and the Ruby payload in each sample's RAW field
// (Payload: decoded, named, weighed). The perf records around the payload
// are laid out as OutputFormat says, and decoded by their reader (perfdata),
// not here. Each sample carries the process's GC
// stamp (GCStamp: how many GCs it had started, and when its last major GC
// did), and the program's record of named frames holds the span of samples
// each name holds for (Span), so that a sample whose frames' code may have
// been replaced since they were named wakes the recorder at once.
//
// It takes a rubybuild.Layout and converts it to the program's configuration;
// it must not know about output formats or perf.data encoding.
package bpf
