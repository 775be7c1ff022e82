package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/rubyperf/rubyperf/"

// allowed lists, for each package, the project packages it may import.
// Test files may also import the test helpers in testHelpers.
var allowed = map[string][]string{
	"debuginfo": {"internal/safefile"},
	"rubybuild": {"debuginfo", "internal/safefile"},
	"rubystack": {"rubybuild", "procmaps", "threadlocal"},
	// payload decodes what the BPF program writes (its C structs declared
	// from the program's BTF); it loads nothing, so it links no cilium.
	"payload": {"rubystack"},
	// symtab is a recording's Ruby symbol table: filled from live memory
	// through rubystack while recording, read back from the file after.
	"symtab": {"payload", "rubystack", "internal/bounded"},
	// readback reads a recording back into merged stacks; it loads nothing,
	// so report, script and convert link no cilium.
	"readback":  {"symtab", "payload", "merge", "native", "perfdata", "rubystack", "debuginfo", "internal/safefile", "internal/bounded"},
	"bpf":       {"rubybuild", "rubystack", "payload", "native"},
	"perfdata":  {"internal/safefile"},
	"perfmap":   {"internal/safefile"},
	"outfile":   {},
	"merge":     {"rubystack"},
	"recording": {"bpf", "payload", "rubybuild", "rubystack", "perfdata", "native", "merge", "debuginfo", "outfile", "threadlocal", "internal/safefile", "internal/procstat", "internal/bounded", "symtab", "readback", "procmaps"},
	// threadlocal finds a shared object's thread-local variables in a live
	// process, through glibc's own descriptions: no Ruby, perf or BPF. It
	// opens ELF files within debuginfo's bounds (debuginfo.NewELF).
	"threadlocal": {"procmaps", "debuginfo", "internal/safefile"},
	// procmaps reads /proc/PID/maps for every package that looks at a live process.
	"procmaps": {},
	"native":   {"debuginfo", "internal/safefile"},
	"export":   {"merge"},
	// agent samples every Ruby through a live recording and sends OTLP
	// profiles; nothing imports it but the CLI.
	"agent":        {"recording", "merge", "export", "debuginfo"},
	"cmd/rubyperf": {"*"},
	// packaging tests the install as a user runs it: the built binary,
	// not rubyperf's packages.
	"packaging":         {"internal/testruby", "internal/testskip"},
	"internal/testruby": {"internal/testskip", "internal/procstat"},
	// internal/debuginfodtest serves debug files with a real debuginfod.
	"internal/debuginfodtest": {"internal/testskip", "internal/testruby"},
	// internal/testskip is the one rule for when a test may skip; it knows
	// no test's needs.
	"internal/testskip": {},
	// internal/cmd/testsummary runs make test's go test and counts its
	// skips by testskip's switch.
	"internal/cmd/testsummary": {"internal/testskip"},
	// internal/cmd/btftypes declares payload's C structs from the BPF
	// objects' BTF (make generate): the one place that reads them with cilium.
	"internal/cmd/btftypes": {},
	// internal/rubyoracle builds the C extension that asks Ruby for its own
	// stack, into the test Rubies' cache.
	"internal/rubyoracle": {"internal/rubyext"},
	// internal/rubyext compiles the tests' C extensions against a test Ruby;
	// internal/profilerstate builds the one that publishes request labels.
	"internal/rubyext":       {"internal/testruby"},
	"internal/profilerstate": {"internal/rubyext", "internal/testruby"},
	"internal/archtest":      {},
	// internal/safefile opens what another user may have put at a path
	// (a FIFO, a device) without blocking, for every package that reads one.
	"internal/safefile": {},
	// internal/bounded decompresses a recording's sections within bounds,
	// for every package that reads one.
	"internal/bounded": {},
	// internal/procstat reads /proc/PID/stat for the recorder, the
	// benchmarks and the tests.
	"internal/procstat": {},
	// internal/otelcoltest builds a real OpenTelemetry Collector
	// (testdata/collector) into $RUBYPERF_CACHE and runs it for tests.
	"internal/otelcoltest": {"internal/testruby"},
	// internal/pyroscopetest runs a real Grafana Pyroscope built into
	// $RUBYPERF_CACHE, for the tests built with -tags pyroscope.
	"internal/pyroscopetest": {"internal/testruby"},
	// bench runs the rubyperf binary and its peers as a user would.
	"bench": {"internal/procstat"},
}

// testHelpers are the packages any test file may import.
var testHelpers = map[string]bool{"internal/testruby": true, "internal/debuginfodtest": true, "internal/rubyoracle": true,
	"internal/profilerstate": true, "internal/rubyext": true, "internal/otelcoltest": true,
	"internal/pyroscopetest": true, "internal/testskip": true}

// testImports lists, for a package's test files only, project packages they
// may import beyond its rules: bpf's benchmark finds the request labels'
// thread-local variable with threadlocal, as recording does for the program,
// and bpf's tests read the records Run delivers with perfdata, as recording
// does; agent's tests ask bpf whether they can run; bpf's benchmark waits
// for the workload's CPU time through procstat; native's tests read stock
// perf's stack copies with perfdata, to check its two unwinders agree.
var testImports = map[string][]string{"bpf": {"threadlocal", "perfdata", "internal/procstat", "procmaps"}, "agent": {"bpf"},
	"native": {"perfdata"}}

// stdlibOnly packages may import nothing outside the standard library
// (golang.org/x is allowed to rubybuild and rubystack for sys and arch).
var stdlibOnly = map[string]bool{"perfdata": true, "perfmap": true, "outfile": true, "procmaps": true, "internal/safefile": true, "internal/bounded": true,
	"internal/testskip": true, "internal/procstat": true}

// externalOnly packages may import, outside the standard library, only
// what starts with one of the listed prefixes.
var externalOnly = map[string][]string{
	"debuginfo":               {"golang.org/x/sys/"},
	"internal/debuginfodtest": {"golang.org/x/sys/"},
	"internal/rubyoracle":     {},
	"threadlocal":             {"golang.org/x/sys/"},
}

func TestImportsPointOneWay(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		rules, ok := allowed[rel]
		if !ok {
			t.Errorf("%s: package %s has no entry in the import rules; add it to allowed", path, rel)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		isTest := strings.HasSuffix(path, "_test.go")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module) {
				dep := strings.TrimPrefix(p, module)
				if dep == "cmd/rubyperf" {
					t.Errorf("%s imports cmd/rubyperf: nothing imports cmd", path)
				}
				if !permits(rules, dep) && !(isTest && (testHelpers[dep] || permits(testImports[rel], dep))) {
					t.Errorf("%s (package %s) imports %s, which it may not", path, rel, dep)
				}
				continue
			}
			if stdlibOnly[rel] && !isTest && strings.Contains(strings.Split(p, "/")[0], ".") {
				t.Errorf("%s (package %s) imports %s: it may use only the standard library", path, rel, p)
			}
			if prefixes, ok := externalOnly[rel]; ok && strings.Contains(strings.Split(p, "/")[0], ".") && !hasPrefix(p, prefixes) {
				t.Errorf("%s (package %s) imports %s: outside the standard library it may use only %v", path, rel, p, prefixes)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("read only %d Go files; is the walk rooted right?", seen)
	}
}

func hasPrefix(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}

func permits(rules []string, dep string) bool {
	for _, r := range rules {
		if r == "*" || r == dep {
			return true
		}
	}
	return false
}
