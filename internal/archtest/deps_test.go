package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

// noLoader lists the packages that read what the BPF program wrote, which
// must not link what loads it: neither bpf nor cilium/ebpf, through any
// import (go list -deps), so that reading a recording needs neither.
var noLoader = []string{"payload", "symtab", "readback"}

func TestReadersLinkNoLoader(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go list needs the go command: %v", err)
	}
	for _, pkg := range noLoader {
		out, err := exec.Command(gocmd, "list", "-deps", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s: %d packages; is the module path right?", pkg, len(deps))
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/cilium/ebpf") || d == module+"bpf" || d == module+"recording" {
				t.Errorf("%s links %s: a reader of a recording must not link what loads the program", pkg, d)
			}
		}
	}
}
