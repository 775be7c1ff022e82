// Package export renders profiles, lists of merged stacks (merge.Stack),
// into the formats people already have tools for: Brendan Gregg's folded
// stacks (flamegraph.pl, inferno, speedscope), gzipped pprof protobufs
// (go tool pprof, Pyroscope, Parca), speedscope's JSON file format, and a
// self-contained interactive flame graph SVG that needs no other tool.
//
// It owns the layout and the escaping rules of each format, and the one
// rule every text output of rubyperf shows a target's names by (Printable:
// control bytes and invalid UTF-8 escaped, \n, \x1b, \u0085, so a frame
// is one line and no escape sequence reaches a terminal): which
// characters would break a folded line, how Ruby, C-method, native and
// kernel frames map onto pprof's Function, Location and Mapping, what
// speedscope requires of a file, and how a flame graph is drawn. Every
// writer is deterministic: the same stacks give the same bytes.
//
// Each format has a builder (Pprof, Folded, FlameGraph, Speedscope) that
// takes stacks one at a time with Add and keeps only what its output needs,
// then writes with Write: a reader streams a recording of any length
// through it. WritePprof and the other Write functions do the same for a
// slice.
//
// It must not know how stacks are collected or merged: no perf.data, no
// eBPF, no Ruby internals. It takes merge.Stack as plain data and imports
// only merge, the standard library and github.com/google/pprof/profile.
package export
