package recording

// FeatureRubySymbols is the private perf.data feature bit holding the Ruby
// symbol table. perf 6.1 skips feature bits it does not know.
const FeatureRubySymbols = 200

// FeatureKallsyms holds /proc/kallsyms as it was while recording, gzipped,
// so kernel frames can be named on another machine.
const FeatureKallsyms = 201

// FeatureStartTime holds when sampling started, wall-clock time: a u64 of
// Unix nanoseconds (samples carry perf's clock, which counts from boot).
const FeatureStartTime = 202
