package perfdata

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// perfBinary returns the path of perf, skipping the test without it under
// internal/testskip's rule.
func perfBinary(t testing.TB) string {
	t.Helper()
	return testskip.Command(t, "perf", "linux-perf")
}

// runPerf runs perf with args and returns its stdout; it fails the test
// if perf exits non-zero.
func runPerf(t testing.TB, args ...string) string {
	t.Helper()
	out, stderr, err := perfOutput(t, args...)
	if err != nil {
		t.Fatalf("perf %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func perfOutput(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(perfBinary(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	// A private HOME keeps perf's build-id cache and config out of the way.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "PAGER=cat")
	err = cmd.Run()
	return o.String(), e.String(), err
}

// perfStats runs `perf report --stats` and returns the aggregated count of
// each record type by perf's name ("SAMPLE", "MMAP2", ...).
func perfStats(t testing.TB, path string) map[string]int {
	t.Helper()
	out := runPerf(t, "report", "--stats", "-i", path)
	stats := map[string]int{}
	line := regexp.MustCompile(`^\s*(\S+) events:\s+(\d+)`)
	in := false
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, "stats:") { // "Aggregated stats:", then one per event
			in = l == "Aggregated stats:"
		}
		if m := line.FindStringSubmatch(l); in && m != nil {
			stats[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	return stats
}

// perfScriptSamples counts the samples `perf script` prints, one line each.
// -G is needed: on a pipe-mode file perf 6.1 prints callchains even with
// -F tid.
func perfScriptSamples(t testing.TB, path string) int {
	t.Helper()
	out := runPerf(t, "script", "-i", path, "-F", "tid", "-G")
	return strings.Count(out, "\n")
}

// readAll reads every record of r, failing the test on an error.
func readAll(t testing.TB, r *Reader) []Record {
	t.Helper()
	var recs []Record
	for r.Next() {
		recs = append(recs, r.Record())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

func writeTemp(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
