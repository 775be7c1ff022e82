package main

import (
	"bytes"
	"flag"
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

// TestHelp: -h prints the command's usage and every flag, exit 0.
func TestHelp(t *testing.T) {
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		code := run([]string{c.name, "-h"}, &stdout, &stderr)
		if code != 0 || !strings.HasPrefix(stderr.String(), "usage: rubyperf "+c.name) || strings.Count(stderr.String(), "\n  -") == 0 {
			t.Errorf("%s -h: exit %d: %q", c.name, code, stderr.String())
		}
	}
}
