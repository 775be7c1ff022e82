// Package otelcoltest gives tests a real OpenTelemetry Collector receiving
// OTLP profiles on 127.0.0.1, and what it received.
//
// It owns building the collector of testdata/collector (a module of its own,
// so the collector's dependencies stay out of rubyperf's go.mod) into
// $RUBYPERF_CACHE/otelcol, once for all test binaries, and running it: on
// free ports, with a profiles pipeline whose profilefile exporter records
// every batch the collector accepted, for Received to read back.
//
// A collector that cannot be built fails the test: it needs only Go and the
// module proxy, which CI has.
//
// Only tests may import this package.
package otelcoltest
