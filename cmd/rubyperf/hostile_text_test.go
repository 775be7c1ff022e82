package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// The names testdata/ruby/hostile_names.rb gives its class, its eval'd
// code and its thread, as every text output must print them: escaped
// (export.Printable), on the line of their frame.
const (
	hostileClass  = `Fake\n\x1b]0;pwned\a\x00<Klass>`
	hostilePath   = `evil\n\x1b]0;pwned\a\tpath.rb`
	hostileThread = `w\x1b[2J\nx`
)

// requireClean fails if text holds a byte a terminal or a line-based
// reader would misread: a control character other than the newline ending
// each line and a tab opening one (the indentation of script and
// snapshot), a C1 control, a line separator or bytes that are not UTF-8.
func requireClean(t *testing.T, what string, text []byte) {
	t.Helper()
	if !utf8.Valid(text) {
		t.Errorf("%s: not valid UTF-8", what)
	}
	for i, line := range strings.Split(string(text), "\n") {
		for j, r := range line {
			if r == '\t' && strings.TrimLeft(line[:j], "\t") == "" {
				continue
			}
			if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
				t.Errorf("%s: line %d holds %q: %q", what, i+1, r, line)
				return
			}
		}
	}
}

// TestHostileNamesInTextOutputs: a Ruby whose class name, eval'd file name
// and thread name hold newlines, escape sequences and a NUL is read by
// snapshot, recorded, and read back by script, report and convert -f
// folded: no output holds a raw control byte, each frame is one line, and
// the names show escaped, the same in every output.
func TestHostileNamesInTextOutputs(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, "source-3.3-static") // set_temporary_name is 3.3's
	script, err := filepath.Abs("../../testdata/ruby/hostile_names.rb")
	if err != nil {
		t.Fatal(err)
	}
	target := testruby.Start(t, r, script)
	pid := strconv.Itoa(target.Process.Pid)

	var stdout, stderr bytes.Buffer
	if code := run([]string{"snapshot", "-p", pid}, &stdout, &stderr); code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, stderr.String())
	}
	requireClean(t, "snapshot", stdout.Bytes())
	for _, want := range []string{"\n\t" + hostilePath + ":4:in '" + hostileClass + ".spin_evil'\n", "\nthread ", ` "` + hostileThread + `"` + "\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("snapshot does not hold %q:\n%s", want, stdout.String())
		}
	}

	out := filepath.Join(t.TempDir(), "hostile.data")
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"record", "-p", pid, "-d", "2", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("record: exit %d: %s", code, stderr.String())
	}
	requireClean(t, "record's summary", stderr.Bytes())

	// script: a header line, frame lines "\tADDR NAME (WHERE)", a blank line.
	stdout.Reset()
	if code := run([]string{"script", "-i", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("script: exit %d: %s", code, stderr.String())
	}
	requireClean(t, "script", stdout.Bytes())
	frameLine := regexp.MustCompile(`^\t *[0-9a-f]+ \S.* \(\S+\)$`)
	evilFrames, headers := 0, 0
	inSample := false
	for i, line := range strings.Split(stdout.String(), "\n") {
		switch {
		case line == "":
			inSample = false
		case !inSample:
			inSample = true
			headers++
			if strings.HasPrefix(line, hostileThread+" ") {
				continue
			}
			if !strings.HasPrefix(line, "ruby ") {
				t.Fatalf("script: line %d is no sample header: %q", i+1, line)
			}
		case !frameLine.MatchString(line):
			t.Fatalf("script: line %d is no frame: %q", i+1, line)
		case strings.Contains(line, " "+hostileClass+".spin_evil ("+hostilePath+":"):
			evilFrames++
		}
	}
	if headers < 20 || evilFrames < headers/2 {
		t.Errorf("script: %d samples, %d frames named %s.spin_evil in %s", headers, evilFrames, hostileClass, hostilePath)
	}

	stdout.Reset()
	if code := run([]string{"report", "--threads", "-i", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr.String())
	}
	requireClean(t, "report", stdout.Bytes())
	row := regexp.MustCompile(`(?m)^ *[0-9.]+% +[0-9.]+% +` + regexp.QuoteMeta(hostileClass+".spin_evil") + ` +` + regexp.QuoteMeta(hostilePath) + `:\d+$`)
	if !row.Match(stdout.Bytes()) || !strings.Contains(stdout.String(), `"`+hostileThread+`" (pid `+pid+`)`) {
		t.Errorf("report has no row for %s.spin_evil at %s, or no table for thread %s:\n%s", hostileClass, hostilePath, hostileThread, stdout.String())
	}

	folded := filepath.Join(t.TempDir(), "out.folded")
	if code := run([]string{"convert", "-f", "folded", "-i", out, "-o", folded}, &stdout, &stderr); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	requireClean(t, "folded", b)
	// The folded format turns ';' into ':' (it separates frames).
	foldedName := strings.ReplaceAll(hostileClass, ";", ":") + ".spin_evil"
	if !bytes.Contains(b, []byte(hostileThread+";")) || !bytes.Contains(b, []byte(";"+foldedName)) {
		t.Errorf("folded stacks do not name %s in thread %s:\n%.2000s", foldedName, hostileThread, b)
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if !regexp.MustCompile(`^[^; ][^;]*(;[^;]+)* \d+$`).MatchString(line) {
			t.Fatalf("folded line %d: %q", i+1, line)
		}
	}
}
