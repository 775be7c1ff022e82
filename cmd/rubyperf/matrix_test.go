package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestRecordReportEveryRuby: on every Ruby of the test matrix (Debian's
// binaries as each suite ships them, source builds with and without DWARF,
// the musl builds, and the local mirror builds when present), `record -- ruby workload.rb`
// followed by `report` and `script` names the workload's own methods, and
// no more than a few frames are unknown.
func TestRecordReportEveryRuby(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	for _, r := range testruby.WithMusl(t) {
		t.Run(r.Name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rubyperf.data")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"record", "-F", "199", "-d", "3", "-o", out, "--", r.Exe, workload(t), "10"},
				&stdout, &stderr); code != 0 {
				t.Fatalf("record on Ruby %s: exit %d: %s", r.Version, code, stderr.String())
			}
			sum := parseSummary(t, stderr.String())
			if sum.samples < 100 {
				t.Fatalf("only %d samples: %s", sum.samples, stderr.String())
			}
			if sum.unknown*20 > sum.samples {
				t.Errorf("%d unknown frames in %d samples", sum.unknown, sum.samples)
			}
			stdout.Reset()
			stderr.Reset()
			if code := run([]string{"report", "-i", out, "-n", "40"}, &stdout, &stderr); code != 0 {
				t.Fatalf("report: exit %d: %s", code, stderr.String())
			}
			for _, m := range []string{"Fib.fib", "Workload#step", "Workload#serialize"} {
				if !strings.Contains(stdout.String(), m) {
					t.Errorf("report does not name %s:\n%s", m, stdout.String())
				}
			}
			stdout.Reset()
			if code := run([]string{"script", "-i", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("script: exit %d: %s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), "Fib.fib") || !strings.Contains(stdout.String(), "Workload#step") {
				t.Errorf("script does not name both Fib.fib and Workload#step")
			}
		})
	}
}
