// Command bench measures what rubyperf costs against the peers a user would
// otherwise run, in one run on one machine, and prints one Markdown table in
// which every figure stands beside its peer's: the target's slowdown while
// recorded (unprofiled, stackprof, perf record --call-graph dwarf, and
// rubyperf with and without --wall, also on a switch-heavy target), the BPF
// programs' run time per sample (A/B with and without the thread's state and
// request labels; the off-CPU program beside the cpu-clock one),
// post-processing throughput against perf script, bytes per sample, attach
// time and the recorder's memory.
//
// It runs real processes only (make bench: go run ./bench) and asserts
// nothing: speed lives here, never in make test. It must not be imported.
package main
