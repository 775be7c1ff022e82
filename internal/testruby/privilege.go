package testruby

import (
	"os"
	"testing"
)

// Privileged skips a test that needs root (ptrace, eBPF, perf_event) when it
// cannot have it, and fails it instead when RUBYPERF_REQUIRE_BPF=1, so CI
// cannot pass by skipping.
func Privileged(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("RUBYPERF_REQUIRE_BPF") == "1" {
		t.Fatalf("privileged test cannot run (RUBYPERF_REQUIRE_BPF=1): %v", err)
	}
	t.Skipf("needs privileges: %v", err)
}
