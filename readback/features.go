package readback

// The sections of a perf.data a recording adds to perf's: private
// feature bits, which perf 6.1 skips.

// FeatureRubySymbols is the private perf.data feature bit holding the Ruby
// symbol table. perf 6.1 skips feature bits it does not know.
const FeatureRubySymbols = 200

// FeatureKallsyms holds /proc/kallsyms as it was while recording, gzipped,
// so kernel frames can be named on another machine.
const FeatureKallsyms = 201

// FeatureStartTime holds when sampling started, wall-clock time: a u64 of
// Unix nanoseconds (samples carry perf's clock, which counts from boot).
const FeatureStartTime = 202

// FeatureSampleKinds says which kinds of samples a recording took: a u32
// of SampleKinds bits. A recording without it took CPU samples only.
const FeatureSampleKinds = 203

// FeatureAllocLive lists the allocation samples whose objects were alive
// when the recording ended (record --alloc --live), having survived a GC:
// a u32 format (1), a u32 count, six u64 counts (followed, alive, young,
// died, unknown, not followed: recording.Summary's Live*), then per sample
// its pid, tid, window and seq (u32) and slot (u64).
const FeatureAllocLive = 204

// SampleKinds are the bits of FeatureSampleKinds.
const (
	KindsCPU   = 1 << 0 // cpu-clock samples (and off-CPU ones, record --wall)
	KindsAlloc = 1 << 1 // allocation samples (record --alloc)
)

// SymbolsPath is where a recording in progress keeps a copy of its Ruby
// symbol table: beside it, removed once the table is in the file.
func SymbolsPath(recording string) string { return recording + ".symbols" }
