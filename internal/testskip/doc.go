// Package testskip is the one rule for when a test may skip: only when what
// it needs is missing from this machine, said by an error that is
// ErrNotSupported (a *NotSupported names what is missing and how to get
// it), and never when the run must not pass by skipping (MustRun: CI=true,
// or RUBYPERF_REQUIRE_BPF=1 as .ci/run sets), where the same cause fails the
// test. Any other error fails the test: a test that cannot set itself up
// has found a fault, not a missing tool.
//
// It owns that rule, the switch that turns it off, and the classing of
// privilege errors (EPERM, EACCES) as a missing privilege. It must not know
// what any test needs: tests and the test helpers (internal/testruby,
// internal/debuginfodtest) name their own causes. It imports only the
// standard library.
package testskip
