// Package testruby gives tests the real Rubies that scripts/test-rubies.sh
// builds into $RUBYPERF_CACHE, and starts Ruby processes for them.
//
// A missing Ruby skips the test under internal/testskip's rule: it fails
// instead where the run must not skip (CI).
package testruby

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// Ruby is one test Ruby, as scripts/test-rubies.sh describes it in the
// flavor directory's manifest.
type Ruby struct {
	Name    string // flavor, e.g. "debian-3.3-trixie", "source-3.3-static"
	Version string // RUBY_VERSION
	Kind    string // "debian" (a distro binary) or "source" (built here)
	Suite   string // the Debian suite of a distro binary
	Exe     string // the interpreter to run
	VM      string // the ELF file holding the VM: libruby or the executable
	DWARF   bool   // VM carries DWARF
	Symtab  bool   // VM has a .symtab
	// Local: built by hand from a copy of Ruby's repository
	// (scripts/mirror-rubies.sh); CI cannot build it, so it is never required.
	Local bool
	// Refused: a build rubyperf must refuse (its layout is unknowable), kept
	// out of All.
	Refused bool
	// Libc is the C library it is linked against: "glibc", or "musl".
	Libc string
}

// Cache is the directory test Rubies are built in.
func Cache() string {
	if c := os.Getenv("RUBYPERF_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "rubyperf")
}

func rubyDir() string { return filepath.Join(Cache(), "ruby") }

// matrix lists the flavors scripts/test-rubies.sh set up in its last run.
func matrix(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rubyDir(), "matrix"))
	if err != nil {
		testskip.IfNotSupported(t, testskip.Missing("the test Rubies in "+rubyDir(), "scripts/test-rubies.sh builds them (make test does)", err))
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// All returns every test Ruby of the matrix that rubyperf must read, failing
// (CI) or skipping (elsewhere) when one is missing.
func All(t testing.TB) []Ruby {
	t.Helper()
	var out []Ruby
	for _, name := range matrix(t) {
		if r := Get(t, name); !r.Refused {
			out = append(out, r)
		}
	}
	return out
}

// Get returns one test Ruby by flavor name. A name that is a prefix of
// flavor names up to a "-" ("debian-3.1") means the newest such flavor.
func Get(t testing.TB, name string) Ruby {
	t.Helper()
	if r, ok := load(name); ok {
		return r
	}
	var best Ruby
	found := false
	for _, n := range matrix(t) {
		if !strings.HasPrefix(n, name+"-") {
			continue
		}
		if r, ok := load(n); ok && (!found || versionLess(best.Version, r.Version)) {
			best, found = r, true
		}
	}
	if found {
		return best
	}
	testskip.IfNotSupported(t, testskip.Missing("test Ruby "+name+" in "+rubyDir(), "scripts/test-rubies.sh builds it (make test does)", nil))
	return Ruby{}
}

// MuslFlavors are the musl test Rubies scripts/test-rubies.sh always builds:
// shared, stripped as Alpine ships libruby, and static (libruby in the
// executable). All holds the first two only with RUBYPERF_MUSL_MATRIX=1.
var MuslFlavors = []string{"source-3.3-musl", "source-3.3-musl-stripped", "source-3.3-musl-static"}

// WithMusl is All and the musl flavors it lacks, failing (CI) or skipping
// (elsewhere) when one is missing: for the tests that say a musl Ruby reads
// as a glibc one does (snapshots, BPF samples and recordings against Ruby's
// own answer, record and report, the thread's state, request labels), which
// CI runs on them without running every test on them.
func WithMusl(t testing.TB) []Ruby {
	t.Helper()
	out := All(t)
	for _, name := range MuslFlavors {
		if !slices.ContainsFunc(out, func(r Ruby) bool { return r.Name == name }) {
			out = append(out, Get(t, name))
		}
	}
	return out
}

// RunsWithMusl is Runs and the musl flavors Runs lacks, interpreted.
func RunsWithMusl(t testing.TB) []JITRun {
	t.Helper()
	out := Runs(t)
	for _, r := range WithMusl(t)[len(All(t)):] {
		out = append(out, JITRun{Ruby: r})
	}
	return out
}

// WithDWARF is All's Rubies whose VM carries DWARF, at least one (else the
// test fails: the matrix builds some).
func WithDWARF(t testing.TB) []Ruby {
	t.Helper()
	var out []Ruby
	for _, r := range All(t) {
		if r.DWARF {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("no test Ruby carries DWARF: scripts/test-rubies.sh builds source-* flavors with it")
	}
	return out
}

// Optional returns the test Ruby name if it is built, without failing.
func Optional(name string) (Ruby, bool) { return load(name) }

func load(name string) (Ruby, bool) {
	dir := filepath.Join(rubyDir(), name)
	if _, err := os.Stat(filepath.Join(dir, "ok")); err != nil {
		return Ruby{}, false
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest"))
	if err != nil {
		return Ruby{}, false
	}
	kv := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	r := Ruby{Name: name, Version: kv["version"], Kind: kv["kind"], Suite: kv["suite"], Exe: kv["exe"],
		VM: kv["vm"], DWARF: kv["dwarf"] == "1", Symtab: kv["symtab"] == "1", Local: kv["local"] == "1",
		Refused: kv["expect"] == "refused", Libc: cmp.Or(kv["libc"], "glibc")}
	if r.Exe == "" || r.VM == "" || r.Version == "" {
		return Ruby{}, false
	}
	if vm, err := filepath.EvalSymlinks(r.VM); err == nil {
		r.VM = vm
	}
	return r, true
}

// versionLess compares dotted versions numerically.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// A JIT is one of Ruby's JIT compilers as the tests run it: compiling every
// method on its first call.
type JIT struct {
	Name string   // "yjit" or "zjit"
	Args []string // the interpreter flags
}

// JITs are the compilers tried on every test Ruby.
var JITs = []JIT{
	{"yjit", []string{"--yjit", "--yjit-call-threshold=1"}},
	{"zjit", []string{"--zjit", "--zjit-call-threshold=1"}},
}

// Has tells whether r runs with j on (tried once by running it: a build
// without it warns and runs interpreted, or refuses the flag).
func (j JIT) Has(r Ruby) bool {
	v, _ := jitBuilds.LoadOrStore(r.Exe+" "+j.Name, sync.OnceValue(func() bool {
		mod := strings.ToUpper(j.Name) // RubyVM::YJIT, RubyVM::ZJIT
		out, err := exec.Command(r.Exe, "--"+j.Name, "-e",
			fmt.Sprintf("print(defined?(RubyVM::%s) && RubyVM::%s.enabled?)", mod, mod)).Output()
		return err == nil && string(out) == "true"
	}))
	return v.(func() bool)()
}

var jitBuilds sync.Map // Exe+" "+JIT name -> func() bool

// Env is what a test sets so that a script requiring oracle.rb fails at
// start when the JIT is off: a test cannot pass interpreted by mistake.
func (j JIT) Env() (key, value string) { return "RUBYPERF_EXPECT_JIT", j.Name }

// JITRun is a test Ruby run under one of its JITs.
type JITRun struct {
	Ruby
	JIT
}

// Name is the flavor and the JIT: "source-3.4-shared+yjit", or the flavor
// alone for a run without one.
func (r JITRun) Name() string {
	if r.JIT.Name == "" {
		return r.Ruby.Name
	}
	return r.Ruby.Name + "+" + r.JIT.Name
}

// Setenv sets for t what the run's JIT needs (JIT.Env), if it has one.
func (r JITRun) Setenv(t testing.TB) {
	if r.JIT.Name != "" {
		t.Setenv(r.Env())
	}
}

// Runs returns every Ruby of All interpreted (a zero JIT), then WithJIT's.
func Runs(t testing.TB) []JITRun {
	var out []JITRun
	for _, r := range All(t) {
		out = append(out, JITRun{Ruby: r})
	}
	return append(out, WithJIT(t)...)
}

// WithJIT returns each Ruby of All with each JIT it has (jits: the JITs
// wanted, by name; none means every one). Debian's Ruby 3.1 has YJIT, so
// no Ruby with YJIT means the matrix is broken: it skips under
// internal/testskip's rule (fails under CI).
func WithJIT(t testing.TB, jits ...string) []JITRun {
	var out []JITRun
	yjit := false
	for _, r := range All(t) {
		for _, j := range JITs {
			if (len(jits) == 0 || slices.Contains(jits, j.Name)) && j.Has(r) {
				out = append(out, JITRun{r, j})
				yjit = yjit || j.Name == "yjit"
			}
		}
	}
	if !yjit && (len(jits) == 0 || slices.Contains(jits, "yjit")) {
		testskip.IfNotSupported(t, testskip.Missing("a test Ruby with YJIT", "Debian's ruby3.1 has it; scripts/test-rubies.sh", nil))
	}
	return out
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
	return StartCommand(t, exec.Command(r.Exe, args...))
}

// StartCommand is StartOutput for a command made by the caller (its
// environment, its credentials): started, and waited for until it prints
// "ready"; it is killed when the test ends.
func StartCommand(t testing.TB, cmd *exec.Cmd) (*exec.Cmd, []string) {
	t.Helper()
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
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
			t.Fatalf("%v: %v", cmd.Args, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%v: no \"ready\" line within 30s", cmd.Args)
	}
	return cmd, lines
}

// CopyFile copies a test input, making the directories it goes in.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// RepoPath finds a repository file from this file's place in it.
func RepoPath(rel string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the repository")
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}
