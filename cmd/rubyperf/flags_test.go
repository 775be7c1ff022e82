package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestParseFlags: flags may come between positional arguments, and after
// "--" nothing is a flag any more, so a command's own flags reach it.
func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		pos     []string
		out     string
		wantErr bool
	}{
		{[]string{"-o", "f", "--", "ruby", "--yjit", "-e", "1"}, []string{"ruby", "--yjit", "-e", "1"}, "f", false},
		{[]string{"--", "ruby", "-o", "g"}, []string{"ruby", "-o", "g"}, "", false},
		{[]string{"a", "-o", "f", "b"}, []string{"a", "b"}, "f", false},
		{[]string{"a", "--", "-o", "f"}, []string{"a", "-o", "f"}, "", false},
		{[]string{"-o", "f"}, nil, "f", false},
		{[]string{"ruby", "--yjit"}, nil, "", true}, // without "--", --yjit is ours
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		out := fs.String("o", "", "")
		pos, err := parseFlags(fs, tc.args)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: error %v, want error %v", tc.args, err, tc.wantErr)
			continue
		}
		if err == nil && (!slices.Equal(pos, tc.pos) || *out != tc.out) {
			t.Errorf("%q: positional %q, -o %q; want %q, %q", tc.args, pos, *out, tc.pos, tc.out)
		}
	}
}

// TestHelp: -h prints the command's usage and every flag on stdout (asked
// for, so a pager or grep takes it), exit 0, each flag of more than one
// letter spelled with two dashes as the usage lines spell them; rubyperf
// --help lists every command there too, and with no argument at all on
// stderr, exit 2.
func TestHelp(t *testing.T) {
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		code := run([]string{c.name, "-h"}, &stdout, &stderr)
		out := stdout.String()
		if code != 0 || stderr.Len() > 0 || !strings.HasPrefix(out, "usage: rubyperf "+c.name) || strings.Count(out, "\n  -") == 0 {
			t.Errorf("%s -h: exit %d: stdout %q, stderr %q", c.name, code, out, stderr.String())
		}
		for _, line := range strings.Split(out, "\n") {
			name, ok := strings.CutPrefix(line, "  -")
			if !ok {
				continue
			}
			long, dashes := strings.CutPrefix(name, "-")
			if n := len(strings.Fields(long)[0]); n > 1 != dashes {
				t.Errorf("%s -h: %q: the usage spells a flag of one letter with one dash, a longer one with two", c.name, line)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		got, want, wantCode := stdout.String(), "stdout", 0
		if len(args) == 0 {
			got, want, wantCode = stderr.String(), "stderr", 2
		}
		if code != wantCode || !strings.HasPrefix(got, "usage: rubyperf COMMAND") || !strings.Contains(got, "  record ") {
			t.Errorf("rubyperf %q: exit %d, want %d and the commands on %s: stdout %q, stderr %q", args, code, wantCode, want, stdout.String(), stderr.String())
		}
	}
}

// TestVersion: rubyperf version and --version print one line naming the
// Go it was built with.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{arg}, &stdout, &stderr)
		if out := stdout.String(); code != 0 || !strings.HasPrefix(out, "rubyperf ") || !strings.Contains(out, runtime.Version()) ||
			strings.Count(out, "\n") != 1 {
			t.Errorf("rubyperf %s: exit %d: %q", arg, code, out)
		}
	}
}

// TestUsageNamesEveryFlag: each command's usage line names every flag its
// -h lists, spelled as -h spells it, and docs/usage.md's contract is the
// usage lines themselves (rubyperf help's), so that neither falls behind.
func TestUsageNamesEveryFlag(t *testing.T) {
	docs, err := os.ReadFile("../../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		run([]string{c.name, "-h"}, &stdout, &stderr)
		for _, line := range strings.Split(stdout.String(), "\n") {
			name, ok := strings.CutPrefix(line, "  -")
			if !ok {
				continue
			}
			flag := "-" + strings.Fields(name)[0]
			if !regexp.MustCompile(`(^|[\s\[(|])` + regexp.QuoteMeta(flag) + `([\s\]=|)[]|$)`).MatchString(c.args) {
				t.Errorf("%s: the usage line does not name %s: %s", c.name, flag, c.args)
			}
		}
		want := strings.TrimRight(fmt.Sprintf("rubyperf %-8s %s", c.name, c.args), " ")
		if !strings.Contains(string(docs), "\n"+want+"\n") {
			t.Errorf("docs/usage.md's contract does not have %s's usage line as it is:\n%s", c.name, want)
		}
	}
}
