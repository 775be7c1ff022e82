package archtest

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
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

// readerCommands are the files of cmd/rubyperf that only read a recording
// (report, script, convert and the flags they share): they read it through
// readback, never through what records one.
var readerCommands = []string{"input.go", "report.go", "script.go", "convert.go"}

func TestReaderCommandsImportNoLoader(t *testing.T) {
	fset := token.NewFileSet()
	for _, name := range readerCommands {
		path := filepath.Join("..", "..", "cmd", "rubyperf", name)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/cilium/ebpf") || p == module+"bpf" || p == module+"recording" {
				t.Errorf("%s imports %s: a command that reads a recording reads it through readback", path, p)
			}
		}
	}
}
