// Package agent is rubyperf's continuous profiler: it samples every Ruby
// process on the machine, including the ones that start later (a live
// recording), aggregates each process's merged stacks over an interval,
// and sends them as OpenTelemetry profiles (OTLP, over gRPC or HTTP) to a
// collector or a backend that takes OTLP, or as pprof to Grafana
// Pyroscope's ingest API. It bounds what it holds: distinct stacks per interval, and a
// queue of intervals, oldest dropped first, while the collector cannot be
// reached; sampling never waits for the network.
//
// It owns the OTLP encoding of profiles (resource attributes inline, what
// every consumer reads: inline.go), the series names of Pyroscope's
// ingest API, and the sending; the pprof is export's. Frames are named
// as every other format names them (export.FrameName). It must not know
// how Ruby or native stacks are read (recording, rubystack and native do)
// or how perf.data is laid out.
package agent
