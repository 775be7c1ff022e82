package testskip

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"
)

// ErrNotSupported is the cause of every skip: this machine lacks something
// a test needs (a tool, a privilege, a test Ruby), not that something is
// wrong.
var ErrNotSupported = errors.New("not supported on this machine")

// NotSupported says what this machine lacks for a test and how to get it.
type NotSupported struct {
	Missing string // what is missing: "perf", "root", "test Ruby debian-3.1"
	Remedy  string // how to get it: "scripts/deps.sh installs linux-perf"
	Err     error  // what showed it missing, if anything
}

func (e *NotSupported) Error() string {
	s := "needs " + e.Missing
	if e.Remedy != "" {
		s += " (" + e.Remedy + ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes every *NotSupported an ErrNotSupported.
func (e *NotSupported) Is(target error) bool { return target == ErrNotSupported }

func (e *NotSupported) Unwrap() error { return e.Err }

// Missing is the cause of a test that cannot run here: missing is what it
// needs, remedy how to get it, err (may be nil) what showed it missing.
func Missing(missing, remedy string, err error) error {
	return &NotSupported{Missing: missing, Remedy: remedy, Err: err}
}

// MustRun says whether this run must not pass by skipping: under CI=true
// (CI sets it) or RUBYPERF_REQUIRE_BPF=1 (.ci/run exports it).
func MustRun() bool {
	return os.Getenv("CI") == "true" || os.Getenv("RUBYPERF_REQUIRE_BPF") == "1"
}

// IfNotSupported returns when err is nil; skips the test when err is
// ErrNotSupported, unless MustRun, where it fails it with the cause; and
// fails it on any other error.
func IfNotSupported(tb testing.TB, err error) {
	tb.Helper()
	switch {
	case err == nil:
	case !errors.Is(err, ErrNotSupported):
		tb.Fatal(err)
	case MustRun():
		tb.Fatalf("%v (this run must not skip: CI=true or RUBYPERF_REQUIRE_BPF=1)", err)
	default:
		tb.Skip(err)
	}
}

// Privileged passes err, an error of something that needs privileges
// (perf_event_open, bpf, ptrace, a mount, a sysctl), to IfNotSupported as a
// missing privilege when it is EPERM or EACCES (fs.ErrPermission), and
// fails the test on any other error.
func Privileged(tb testing.TB, err error) {
	tb.Helper()
	if err != nil && errors.Is(err, fs.ErrPermission) {
		err = Missing("privileges", "run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE", err)
	}
	IfNotSupported(tb, err)
}

// Root skips the test (under the rule of IfNotSupported) unless it runs as
// root; why says what root is for.
func Root(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		IfNotSupported(tb, Missing("root", why, nil))
	}
}

// Command returns the path of the program name, skipping the test (under
// the rule of IfNotSupported) without it; pkg is the Debian package that
// has it.
func Command(tb testing.TB, name, pkg string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		IfNotSupported(tb, Missing(name, "Debian "+pkg+"; scripts/deps.sh installs it", err))
	}
	return p
}
