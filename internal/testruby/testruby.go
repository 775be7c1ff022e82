// Package testruby gives tests the real Rubies that scripts/test-rubies.sh
// builds into $RUBYPERF_CACHE, and starts Ruby processes for them.
//
// A missing Ruby skips the test, except under CI=true, where it fails: CI
// must not pass by skipping.
package testruby

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ruby is one test Ruby.
type Ruby struct {
	Name    string // flavor, e.g. "3.3.8-static"
	Version string
	Exe     string // the interpreter to run
	VM      string // the ELF file holding the VM: libruby or the executable
	DWARF   bool   // VM carries DWARF
	Symtab  bool   // VM has a .symtab
}

var flavors = []Ruby{
	{Name: "3.1.2-debian", Version: "3.1.2"},
	{Name: "3.1.2-shared", Version: "3.1.2", DWARF: true, Symtab: true},
	{Name: "3.3.8-static", Version: "3.3.8", DWARF: true, Symtab: true},
	{Name: "3.3.8-static-stripped", Version: "3.3.8"},
}

// Cache is the directory test Rubies are built in.
func Cache() string {
	if c := os.Getenv("RUBYPERF_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "rubyperf")
}

// All returns every test Ruby, failing (CI) or skipping (elsewhere) when one is missing.
func All(t testing.TB) []Ruby {
	t.Helper()
	out := make([]Ruby, 0, len(flavors))
	for _, f := range flavors {
		out = append(out, Get(t, f.Name))
	}
	return out
}

// Get returns one test Ruby by flavor name.
func Get(t testing.TB, name string) Ruby {
	t.Helper()
	for _, f := range flavors {
		if f.Name != name {
			continue
		}
		dir := filepath.Join(Cache(), "ruby", name)
		if _, err := os.Stat(filepath.Join(dir, "ok")); err != nil {
			missing(t, "test Ruby %s is not built in %s; run scripts/test-rubies.sh (make test does)", name, dir)
		}
		f.Exe = filepath.Join(dir, "ruby")
		vm, err := filepath.EvalSymlinks(filepath.Join(dir, "vm"))
		if err != nil {
			missing(t, "test Ruby %s: %v; rerun scripts/test-rubies.sh", name, err)
		}
		f.VM = vm
		return f
	}
	t.Fatalf("no test Ruby flavor %q", name)
	return Ruby{}
}

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Start runs ruby with args and waits until it prints a line "ready" on
// stdout. The process is killed when the test ends.
func Start(t testing.TB, r Ruby, args ...string) *exec.Cmd {
	t.Helper()
	cmd, _ := StartOutput(t, r, args...)
	return cmd
}

// StartOutput is Start, also returning the lines printed before "ready".
func StartOutput(t testing.TB, r Ruby, args ...string) (*exec.Cmd, []string) {
	t.Helper()
	cmd := exec.Command(r.Exe, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", r.Exe, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	var lines []string
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- nil
				return
			}
			lines = append(lines, sc.Text())
		}
		ready <- fmt.Errorf("exited before printing ready: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no \"ready\" line within 30s", r.Name)
	}
	return cmd, lines
}
