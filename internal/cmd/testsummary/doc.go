// Command testsummary runs go test -json and prints what make test needs to
// read: each package's result as go test prints it, the whole output of
// every test that failed, then each failed test again with its messages cut
// short (what a reader of the log's last lines sees of why), and a last line
// counting tests passed, failed and skipped, with every skip and its reason. Under CI=true or
// RUBYPERF_REQUIRE_BPF=1 a skipped test fails the run: CI must not pass by
// skipping (internal/testskip's rule, seen from outside).
//
//	go run ./internal/cmd/testsummary go test -json -count=1 ./...
//
// It knows go test's JSON events (cmd/test2json), and nothing of the tests.
package main
