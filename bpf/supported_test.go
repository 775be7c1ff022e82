package bpf

import (
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestSupported: on a kernel with what the program needs (bpf_loop), and
// with the privileges, Supported says so; without them it says why.
func TestSupported(t *testing.T) {
	err := Supported()
	testskip.Privileged(t, err)
	if err != nil {
		t.Fatal(err)
	}
}
