package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/symtab"
)

// notNamedCounts are the Ruby frames without a name in a recording, by
// kind, and the samples with any.
type notNamedCounts struct{ samples, unknown, replaced int }

var notNamedRe = regexp.MustCompile(`(\d+) of (\d+) samples \([0-9.]+%\) have Ruby frames without a name:(?:\n#)?\s+(?:(\d+) \[unknown\])?(?:, )?(?:(\d+) \[code freed before it was named\])?`)

// parseNotNamed reads the counts from record's summary or report's header:
// zero when the line is not there, which says there is nothing to count.
func parseNotNamed(t *testing.T, text string) notNamedCounts {
	t.Helper()
	m := notNamedRe.FindStringSubmatch(text)
	if m == nil {
		if strings.Contains(text, "without a name") {
			t.Fatalf("unreadable line about frames without a name in %q", text)
		}
		return notNamedCounts{}
	}
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	return notNamedCounts{n(m[1]), n(m[3]), n(m[4])}
}

// TestUnnamedFramesCounted: the frames a recording could not name are
// counted alike by record's summary, report's header, script's frames and
// convert's folded stacks, per kind ([unknown]: not readable as sampled;
// [code freed before it was named]: a name not proven for its sample), with
// the samples that have any. The summary once counted only distinct names
// the recorder failed to read, and said "0 unknown frames" beside samples
// full of them. A GC-heavy workload with long environment chains has both
// kinds now and then.
func TestUnnamedFramesCounted(t *testing.T) {
	r := testruby.Get(t, "debian-3.3")
	script, _ := filepath.Abs("../../testdata/ruby/gcpressure.rb")
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	sum, stderr := recordOutput(t, "-F", "999", "-o", out, "--", r.Exe, script, "2")
	want := parseNotNamed(t, stderr)
	if want.unknown != sum.unknown {
		t.Errorf("the summary says %d unknown frames, and %d in its line about frames without a name", sum.unknown, want.unknown)
	}
	t.Logf("record: %d samples, %+v", sum.samples, want)

	var stdout, errb bytes.Buffer
	if code := run([]string{"report", "-i", out}, &stdout, &errb); code != 0 {
		t.Fatalf("report: exit %d: %s", code, errb.String())
	}
	if got := parseNotNamed(t, stdout.String()); got != want {
		t.Errorf("report counts %+v, record %+v", got, want)
	}

	stdout.Reset()
	if code := run([]string{"script", "-i", out}, &stdout, &errb); code != 0 {
		t.Fatalf("script: exit %d: %s", code, errb.String())
	}
	var got notNamedCounts
	samples := 0
	for _, s := range strings.Split(stdout.String(), "\n\n") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		samples++
		u := len(regexp.MustCompile(`(?m)^\s+0 \[unknown\] \(\[unknown\]\)$`).FindAllString(s, -1))
		r := strings.Count(s, symtab.ReplacedLabel)
		got.unknown += u
		got.replaced += r
		if u+r > 0 {
			got.samples++
		}
	}
	if got != want || samples != sum.samples {
		t.Errorf("script shows %d samples, %+v; record said %d, %+v", samples, got, sum.samples, want)
	}

	folded := filepath.Join(t.TempDir(), "out.folded")
	if code := run([]string{"convert", "-i", out, "-f", "folded", "--ruby-only", "-o", folded}, &stdout, &errb); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errb.String())
	}
	// Folded stacks weigh samples by their period (ns): one at -F 999.
	const period = 1001001
	w := foldedNotNamed(t, folded)
	got = notNamedCounts{w.samples / period, w.unknown / period, w.replaced / period}
	if got != want || w.samples%period+w.unknown%period+w.replaced%period != 0 {
		t.Errorf("folded stacks count %+v (weights %+v), record %+v", got, w, want)
		if b, err := os.ReadFile(folded); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "[unknown]") || strings.Contains(l, symtab.ReplacedLabel) {
					t.Logf("folded: %s", l)
				}
			}
		}
	}
}

// foldedNotNamed counts the frames without a name in a folded file,
// weighted by each stack's count of samples.
func foldedNotNamed(t *testing.T, path string) notNamedCounts {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c notNamedCounts
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		n, err := strconv.Atoi(line[i+1:])
		if i < 0 || err != nil {
			t.Fatalf("%s: folded line %q", path, line)
		}
		u, r := 0, 0
		// The first field is the root, the thread's name: "[unknown]"
		// there says no COMM event named the thread, not a Ruby frame.
		for _, fr := range strings.Split(line[:i], ";")[1:] {
			switch fr {
			case "[unknown]":
				u++
			case symtab.ReplacedLabel:
				r++
			}
		}
		c.unknown += n * u
		c.replaced += n * r
		if u+r > 0 {
			c.samples += n
		}
	}
	return c
}
