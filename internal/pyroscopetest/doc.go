// Package pyroscopetest gives tests a real Grafana Pyroscope server on
// 127.0.0.1 and its answers: the profile types it holds, the labels of a
// series, and a flame graph's shares by function.
//
// It owns running the single binary (-target=all, filesystem storage in a
// temporary directory, every listener on loopback, free ports) and reading
// its query API. It does not build Pyroscope: the Go module proxy does not
// serve its modules, so CI cannot. scripts/pyroscope.sh builds it from a
// copy of its repository into $RUBYPERF_CACHE/pyroscope/COMMIT; Binary
// finds it there or at $RUBYPERF_PYROSCOPE. Tests that need it are built
// with the tag pyroscope (make test-pyroscope), so `make test` neither runs
// nor skips them.
//
// Only tests may import this package.
package pyroscopetest
