package testskip

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// recorder is a testing.TB that records whether a check skipped or failed
// the test, and stops the check there as the real ones do.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// check runs f against a recorder in a goroutine of its own (Skip and
// Fatal end it) and says what became of the test.
func check(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestIfNotSupported(t *testing.T) {
	missing := Missing("perf", "scripts/deps.sh installs linux-perf", errors.New("exec: not found"))
	wrapped := fmt.Errorf("perf script: %w", missing)
	eperm := fmt.Errorf("perf_event_open: %w", syscall.EPERM)
	eacces := fmt.Errorf("open /proc/1/mem: %w", syscall.EACCES)
	other := fmt.Errorf("perf_event_open: %w", syscall.EINVAL)
	for _, c := range []struct {
		name      string
		env       map[string]string // CI, RUBYPERF_REQUIRE_BPF
		check     func(testing.TB)
		want      string // "pass", "skip" or "fail"
		wantInMsg string
	}{
		{"nil", nil, func(tb testing.TB) { IfNotSupported(tb, nil) }, "pass", ""},
		{"missing", nil, func(tb testing.TB) { IfNotSupported(tb, missing) }, "skip", "needs perf (scripts/deps.sh installs linux-perf): exec: not found"},
		{"missing, wrapped", nil, func(tb testing.TB) { IfNotSupported(tb, wrapped) }, "skip", "perf script: needs perf"},
		{"missing, CI", map[string]string{"CI": "true"}, func(tb testing.TB) { IfNotSupported(tb, missing) }, "fail", "needs perf"},
		{"missing, RUBYPERF_REQUIRE_BPF", map[string]string{"RUBYPERF_REQUIRE_BPF": "1"}, func(tb testing.TB) { IfNotSupported(tb, missing) }, "fail", "must not skip"},
		{"missing, CI=false", map[string]string{"CI": "false", "RUBYPERF_REQUIRE_BPF": "0"}, func(tb testing.TB) { IfNotSupported(tb, missing) }, "skip", ""},
		{"other error", nil, func(tb testing.TB) { IfNotSupported(tb, other) }, "fail", "invalid argument"},
		{"privileged nil", nil, func(tb testing.TB) { Privileged(tb, nil) }, "pass", ""},
		{"privileged EPERM", nil, func(tb testing.TB) { Privileged(tb, eperm) }, "skip", "needs privileges"},
		{"privileged EACCES", nil, func(tb testing.TB) { Privileged(tb, eacces) }, "skip", "permission denied"},
		{"privileged EPERM, CI", map[string]string{"CI": "true"}, func(tb testing.TB) { Privileged(tb, eperm) }, "fail", "operation not permitted"},
		{"privileged EPERM, RUBYPERF_REQUIRE_BPF", map[string]string{"RUBYPERF_REQUIRE_BPF": "1"}, func(tb testing.TB) { Privileged(tb, eperm) }, "fail", "must not skip"},
		{"privileged other error", nil, func(tb testing.TB) { Privileged(tb, other) }, "fail", "invalid argument"},
		{"command present", nil, func(tb testing.TB) { Command(tb, "sh", "dash") }, "pass", ""},
		{"command absent", nil, func(tb testing.TB) { Command(tb, "rubyperf-no-such-tool", "none") }, "skip", "needs rubyperf-no-such-tool (Debian none; scripts/deps.sh installs it)"},
		{"command absent, CI", map[string]string{"CI": "true"}, func(tb testing.TB) { Command(tb, "rubyperf-no-such-tool", "none") }, "fail", "rubyperf-no-such-tool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CI", c.env["CI"])
			t.Setenv("RUBYPERF_REQUIRE_BPF", c.env["RUBYPERF_REQUIRE_BPF"])
			r := check(c.check)
			got := "pass"
			switch {
			case r.failed:
				got = "fail"
			case r.skipped:
				got = "skip"
			}
			if got != c.want {
				t.Fatalf("%s (%q), want %s", got, r.msg, c.want)
			}
			if !strings.Contains(r.msg, c.wantInMsg) {
				t.Errorf("message %q does not say %q", r.msg, c.wantInMsg)
			}
		})
	}
}

// TestNotSupportedIs: a cause is ErrNotSupported however it is wrapped, and
// still what it wraps.
func TestNotSupportedIs(t *testing.T) {
	err := fmt.Errorf("ptrace: %w", Missing("privileges", "", syscall.EPERM))
	if !errors.Is(err, ErrNotSupported) {
		t.Error("a wrapped *NotSupported is not ErrNotSupported")
	}
	if !errors.Is(err, syscall.EPERM) {
		t.Error("a *NotSupported hides the error it wraps")
	}
	if errors.Is(syscall.EPERM, ErrNotSupported) {
		t.Error("EPERM alone is ErrNotSupported")
	}
}
