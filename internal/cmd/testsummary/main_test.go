package main

import (
	"strings"
	"testing"
)

// TestSummary: a run's passes, failures and skips are counted, a failed
// test's output is printed whole, a skip's reason is its last words, and a
// skip fails the run only where every test must run.
func TestSummary(t *testing.T) {
	lines := []string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:9: not this way\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: needs privileges: operation not permitted\n"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"fail","Package":"p","Elapsed":1.5}`,
		`# q`,
		`q/x.go:1:1: syntax error`,
	}
	for _, mustRun := range []bool{false, true} {
		var out strings.Builder
		s := newSummary(&out)
		for _, l := range lines {
			s.take(l)
		}
		passed := s.finish(mustRun)
		got := out.String()
		for _, want := range []string{"b_test.go:9: not this way", "FAIL\tp\t1.500s", "failed: p TestB\n\tb_test.go:9: not this way\n", "q/x.go:1:1: syntax error",
			"skipped: p TestC: c_test.go:3: needs privileges: operation not permitted", "tests: 1 passed, 1 failed, 1 skipped"} {
			if !strings.Contains(got, want) {
				t.Errorf("mustRun %v: no %q in\n%s", mustRun, want, got)
			}
		}
		if strings.Contains(got, "=== RUN   TestA") {
			t.Errorf("a passed test's output printed:\n%s", got)
		}
		if passed {
			t.Errorf("mustRun %v: a run with a failure passed", mustRun)
		}
	}
	// Skips alone: a failure only where every test must run.
	for _, mustRun := range []bool{false, true} {
		var out strings.Builder
		s := newSummary(&out)
		s.take(`{"Action":"skip","Package":"p","Test":"TestC"}`)
		if passed := s.finish(mustRun); passed == mustRun {
			t.Errorf("mustRun %v: a run with only a skip passed = %v", mustRun, passed)
		}
	}
}

// TestSummaryUnfinished: a test that never ended (go test's -timeout
// killed its package; the panic is in its output) is a failure, named,
// with its last lines.
func TestSummaryUnfinished(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	for _, l := range []string{
		`{"Action":"run","Package":"p","Test":"TestSlow"}`,
		`{"Action":"output","Package":"p","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}`,
		`{"Action":"output","Package":"p","Test":"TestSlow","Output":"panic: test timed out after 25m0s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":1500.3}`,
	} {
		s.take(l)
	}
	if s.finish(false) {
		t.Error("a run with a test that never ended passed")
	}
	got := out.String()
	for _, want := range []string{"p TestSlow never ended", "panic: test timed out after 25m0s", "failed: p TestSlow", "tests: 0 passed, 1 failed, 0 skipped"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}
