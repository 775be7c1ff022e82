package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// TestErrorsEveryCommand: each command's mistakes, as a new user makes
// them, exit 2 (usage) or 1 (failure) with a line that says what is wrong
// and what to do: a bad flag; for the commands that read a recording, none
// where they look by default (record one first), a missing, an empty and
// a foreign file; for those that read a process, a pid that is no number,
// a command where a pid goes, a dead pid, a pid that is not a Ruby.
func TestErrorsEveryCommand(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir) // no rubyperf.data here
	empty, foreign := filepath.Join(dir, "empty.data"), filepath.Join(dir, "notes.txt")
	if os.WriteFile(empty, nil, 0o644) != nil || os.WriteFile(foreign, []byte("these are not samples, but they are long enough\n"), 0o644) != nil {
		t.Fatal("cannot write the test's files")
	}
	self := strconv.Itoa(os.Getpid()) // this test: a process, not a Ruby
	type mistake struct {
		args []string
		code int
		want string
	}
	var cases []mistake
	for _, c := range commands {
		cases = append(cases, mistake{[]string{c.name, "--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"})
	}
	for _, c := range []string{"script", "report", "convert", "inject"} {
		extra := map[string][]string{"convert": {"-f", "folded"}, "inject": {"-o", filepath.Join(dir, "out.data")}}[c]
		cases = append(cases,
			mistake{append([]string{c}, extra...), 1, "rubyperf.data: no recording here: record one first"},
			mistake{append([]string{c, "-i", filepath.Join(dir, "gone.data")}, extra...), 1, "gone.data: no such file"},
			mistake{append([]string{c, "-i", empty}, extra...), 1, "empty.data: not a perf.data file: 0 bytes"},
			mistake{append([]string{c, "-i", foreign}, extra...), 1, "notes.txt: header: bad magic"})
	}
	cases = append(cases, mistake{[]string{"convert", "-i", foreign}, 2, "-f is required: the format to write, one of folded, pprof, speedscope, svg"})
	for _, c := range []string{"record", "top", "snapshot", "heap", "offsets"} {
		cases = append(cases,
			mistake{[]string{c, "-p", "abc"}, 2, "not a pid"},
			mistake{[]string{c, "-p", "4194000", "-d", "1"}, 1, "pid 4194000: no such process"},
			mistake{[]string{c, "-p", self, "-d", "1"}, 1, "pid " + self + ": not a Ruby process"})
	}
	for _, c := range []string{"top", "snapshot", "heap"} {
		cases = append(cases, mistake{[]string{c, "ruby"}, 2, `unexpected argument "ruby": give the process as -p PID`})
	}
	for _, c := range cases {
		if (c.args[0] == "snapshot" || c.args[0] == "heap" || c.args[0] == "offsets") && slices.Contains(c.args, "-d") {
			c.args = c.args[:len(c.args)-2] // they take no duration
		}
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr)
			msg := stderr.String()
			if code != c.code || !strings.Contains(msg, c.want) {
				t.Errorf("exit %d, want %d and %q; stderr:\n%s", code, c.code, c.want, msg)
			}
			if first, _, _ := strings.Cut(msg, "\n"); c.code == 1 && strings.TrimSpace(msg) != first {
				t.Errorf("a failure of more than one line:\n%s", msg)
			}
			if c.code == 1 && strings.Contains(msg, "run as root") && os.Geteuid() == 0 {
				t.Errorf("root is told to run as root:\n%s", msg)
			}
		})
	}
}

// TestErrorAnotherUsersPid: a user who may not read a root's Ruby is told
// so in one line, and what would let them.
func TestErrorAnotherUsersPid(t *testing.T) {
	testskip.Root(t, "it runs rubyperf as nobody against a root's Ruby")
	ruby := testskip.Command(t, "ruby", "ruby3.1")
	target, _ := testruby.StartCommand(t, exec.Command(ruby, "-e", "STDOUT.sync = true; puts :ready; sleep"))
	bin := rubyperfBinary(t)
	for _, c := range []string{"snapshot", "heap", "offsets"} {
		cmd := exec.Command(bin, c, "-p", strconv.Itoa(target.Process.Pid))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		msg := strings.TrimSpace(string(out))
		if err == nil || strings.Count(msg, "\n") > 0 || !strings.Contains(msg, "permission denied") ||
			!strings.Contains(msg, "CAP_SYS_PTRACE") {
			t.Errorf("%s -p of a root's Ruby as nobody: %v, want one line naming the permission and CAP_SYS_PTRACE:\n%s", c, err, msg)
		}
	}
}
