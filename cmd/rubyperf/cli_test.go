package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubystack"
)

// TestErrors: usage mistakes exit 2, failures exit 1, each with one line
// that names the pid or file and says what to do.
func TestErrors(t *testing.T) {
	notRuby := os.Args[0] // this test binary: an ELF that is not Ruby
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "usage: rubyperf COMMAND"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"offsets without target", []string{"offsets"}, 2, "give one BINARY or -p PID"},
		{"offsets both", []string{"offsets", "-p", "1", "/bin/true"}, 2, "not both"},
		{"bad format", []string{"offsets", "--format", "xml", "/bin/true"}, 2, `--format "xml" must be one of`},
		{"bad flag", []string{"offsets", "--bogus"}, 2, "flag provided but not defined"},
		{"dead pid", []string{"offsets", "-p", "4194000"}, 1, "rubyperf: pid 4194000: no such process"},
		{"not ruby pid", []string{"offsets", "-p", strconv.Itoa(os.Getpid())}, 1, "not a Ruby process"},
		{"missing file", []string{"offsets", "/nonexistent/libruby.so"}, 1, "/nonexistent/libruby.so"},
		{"not ruby file", []string{"offsets", notRuby}, 1, "not a Ruby executable or libruby"},
		{"not elf", []string{"offsets", "offsets.go"}, 1, "not an ELF file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, c.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), c.want)
			}
			if c.code == 1 && strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
				t.Errorf("error is not one line: %q", stderr.String())
			}
		})
	}
}

// TestOffsetsLiveDebian: on Debian's stripped ruby3.1, `offsets -p PID`
// reports the built-in table and the TLS offset of ruby_current_ec, equal to
// the DWARF build of the same version, plus the live thread-pointer offset
// and the EC it leads to.
func TestOffsetsLiveDebian(t *testing.T) {
	deb := testruby.Get(t, "debian-3.1")
	dwarfRep := offsetsJSON(t, testruby.Get(t, "source-3.1-shared").VM)
	cmd := testruby.Start(t, deb, "-e", `STDOUT.sync = true; puts "ready"; sleep`)
	rep := offsetsJSON(t, "-p", strconv.Itoa(cmd.Process.Pid))
	if rep.Process == nil {
		t.Fatal("no process section")
	}
	if rep.Process.Error != "" {
		testskip.Privileged(t, reportedError(rep.Process.Error))
	}
	if !strings.HasPrefix(rep.Source, "table:3.1.") {
		t.Errorf("source %q, want a built-in 3.1 table", rep.Source)
	}
	ec, want := rep.Symbols["ruby_current_ec"], dwarfRep.Symbols["ruby_current_ec"]
	if ec.TLSOffset == nil || want.TLSOffset == nil || *ec.TLSOffset != *want.TLSOffset {
		t.Errorf("tls_offset %v, DWARF build %v", ec.TLSOffset, want.TLSOffset)
	}
	if ec.TPOffset == nil || !strings.Contains(ec.How, "DTV") {
		t.Errorf("no live tp_offset: %+v", ec)
	}
	if !strings.HasPrefix(rep.Process.CurrentEC, "0x") || rep.Process.CurrentEC == "0x0" {
		t.Errorf("current_ec %q", rep.Process.CurrentEC)
	}
}

// reportedError is the error rubyperf reported as text (a JSON field, its
// stderr) as an error again: a permission error when the text says one,
// with the words of rubystack.ErrNotPermitted or bpf.ErrNotPermitted, which
// is all a test has to tell it by once it is text.
func reportedError(text string) error {
	for _, refusal := range []string{rubystack.ErrNotPermitted.Error(), bpf.ErrNotPermitted.Error()} {
		if strings.Contains(text, refusal) {
			return fmt.Errorf("%s: %w", strings.TrimSpace(text), fs.ErrPermission)
		}
	}
	return errors.New(strings.TrimSpace(text))
}
