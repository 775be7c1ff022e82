package payload

// OffCPUEnd says a thread sampled as it left a CPU at Left is back on one
// at End (CLOCK_MONOTONIC ns): its sample (OffCPU, Period == Left) stands
// for End - Left. The program writes it to a ring of its own, not into a
// sample.
type OffCPUEnd = cOffcpuEnd
