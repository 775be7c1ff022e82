package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/symtab"
)

// Bounds on reading a recording whose symbol tables are decompression or
// parse bombs (issue 27, item 1): at most this much more peak memory and
// wall time than reading the same recording with its own tables.
const (
	bombExtraRSS  = 64 << 20
	bombExtraTime = 10 * time.Second
	// bombKillRSS: a reader past this is stopped, so that a failing run
	// does not take the host's memory with it.
	bombKillRSS = 1536 << 20
)

// measured is one run of the command as a process.
type measured struct {
	code           int
	stdout, stderr string
	maxRSS         int64 // bytes
	wall           time.Duration
	killed         string // why the watchdog stopped it, if it did
}

// runMeasured runs bin with args and measures its peak RSS and wall time,
// stopping it past bombKillRSS or two minutes.
func runMeasured(t *testing.T, bin string, args ...string) measured {
	t.Helper()
	c := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var killed string
	go func() {
		status := fmt.Sprintf("/proc/%d/status", c.Process.Pid)
		for deadline := time.Now().Add(2 * time.Minute); ; {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				killed = "ran over two minutes"
				c.Process.Kill()
				return
			}
			if rss := procRSS(status); rss > bombKillRSS {
				killed = fmt.Sprintf("RSS %d MiB, over %d MiB", rss>>20, bombKillRSS>>20)
				c.Process.Kill()
				return
			}
		}
	}()
	c.Wait()
	close(done)
	m := measured{code: c.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(),
		wall: time.Since(start), killed: killed}
	if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.maxRSS = ru.Maxrss << 10
	}
	return m
}

// procRSS is VmRSS from a /proc/PID/status, in bytes (0 when gone).
func procRSS(status string) int64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// gzipBomb is the gzip of head, then unit repeated until the compressed
// bytes reach size, then tail.
func gzipBomb(t *testing.T, size int, head, unit, tail string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write([]byte(head))
	chunk := []byte(strings.Repeat(unit, (1<<20)/len(unit)))
	for buf.Len() < size {
		zw.Write(chunk)
	}
	zw.Write([]byte(tail))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// framesBomb is a Ruby symbol table of empty frames, size bytes gzipped.
func framesBomb(t *testing.T, size int) []byte {
	return gzipBomb(t, size, `{"version":3,"frames":[{}`, `,{}`, `]}`)
}

// checkBombRead: report read the bombed recording within the bounds, every
// sample of it, and said in one line, naming file, what it refused.
func checkBombRead(t *testing.T, clean, got measured, file string, says ...string) {
	t.Helper()
	t.Logf("stderr: %s", strings.TrimSpace(got.stderr))
	t.Logf("report: exit %d, peak RSS %d MiB (clean %d MiB), %v (clean %v)", got.code, got.maxRSS>>20,
		clean.maxRSS>>20, got.wall.Round(time.Millisecond), clean.wall.Round(time.Millisecond))
	if got.killed != "" {
		t.Fatalf("report stopped: %s", got.killed)
	}
	if got.code != 0 {
		t.Fatalf("report: exit %d, want 0 (the rest of the file is fine): %s", got.code, got.stderr)
	}
	if got.maxRSS > clean.maxRSS+bombExtraRSS {
		t.Errorf("report's peak RSS %d MiB, over the clean read's %d MiB + %d MiB", got.maxRSS>>20, clean.maxRSS>>20, bombExtraRSS>>20)
	}
	if got.wall > clean.wall+bombExtraTime {
		t.Errorf("report took %v, over the clean read's %v + %v", got.wall, clean.wall, bombExtraTime)
	}
	if a, b := reportSamples(t, got.stdout), reportSamples(t, clean.stdout); a != b {
		t.Errorf("report read %d samples, the clean file %d", a, b)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(got.stderr), "\n") {
		if strings.Contains(l, file) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("want one line on stderr naming %s, got: %q", file, got.stderr)
	}
	for _, s := range says {
		if !strings.Contains(lines[0], s) {
			t.Errorf("stderr does not say %q: %q", s, lines[0])
		}
	}
}

// TestHostileSymbolTableBombs: a recording whose Ruby symbol table (feature
// 200) is 65 or 255 KB of gzip of empty frames (or of blanks, or of one
// long label), or whose kernel symbol table (feature 201) is 98 KB of gzip
// of one line repeated, is read by
// report within bombExtraRSS and bombExtraTime of the clean file: every
// sample, that table refused in one line naming the file and the bound,
// the frames it would have named shown unnamed. (Before: 65 KB took report
// to 6.8 GB and 53 s, 255 KB ran it out of memory, the kernel's 1 GB.)
func TestHostileSymbolTableBombs(t *testing.T) {
	file, _ := workloadRecording(t, time.Second)
	bin := rubyperfBinary(t)
	clean := runMeasured(t, bin, "report", "-i", file)
	if clean.code != 0 {
		t.Fatalf("report of the clean recording: exit %d: %s", clean.code, clean.stderr)
	}
	t.Logf("clean report: peak RSS %d MiB, %v", clean.maxRSS>>20, clean.wall.Round(time.Millisecond))
	kallsyms := gzipBomb(t, 98<<10, "", "ffffffff81000000 T a\n", "")
	for _, c := range []struct {
		name string
		feat perfdata.Feature
		data []byte
		says []string
	}{
		{"ruby-65K", readback.FeatureRubySymbols, framesBomb(t, 65<<10), []string{"ruby symbol table", "frames entry 1"}},
		{"ruby-255K", readback.FeatureRubySymbols, framesBomb(t, 255<<10), []string{"ruby symbol table", "frames entry 1"}},
		// What a bomb that knows the checks above would try next: a table
		// of nothing but whitespace, one label of hundreds of MB.
		{"ruby-blank-255K", readback.FeatureRubySymbols, gzipBomb(t, 255<<10, `{"version":3,"names":[`, "        ", `]}`),
			[]string{"ruby symbol table", "names: an entry over"}},
		{"ruby-long-255K", readback.FeatureRubySymbols, gzipBomb(t, 255<<10, `{"version":3,"names":[{"label":"`, "aaaaaaaa", `"}]}`),
			[]string{"ruby symbol table", "names entry 1: an entry over"}},
		{"kernel-98K", readback.FeatureKallsyms, kallsyms, []string{"kernel symbol table", "compressed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bomb := filepath.Join(t.TempDir(), "bomb.data")
			rewriteRecording(t, file, bomb, recordingRewrite{feats: map[perfdata.Feature][]byte{c.feat: c.data}})
			checkBombRead(t, clean, runMeasured(t, bin, "report", "-i", bomb), bomb, c.says...)
		})
	}
}

// TestHostileSymbolsBeside: nobody plants a .symbols file beside root's
// unfinished recording in a shared directory (as /tmp is): a valid table
// of forged names, or a 32 KB gzip of empty frames. Root's report reads
// the recording within bombExtraRSS and bombExtraTime, every sample, and
// says in one line that the planted table was refused and why: not the
// recording owner's. The same bomb owned by root is refused by the
// decoder's bounds. (Before: forged names were read; the bomb, 3.3 GB.)
func TestHostileSymbolsBeside(t *testing.T) {
	leastPrivilegeRuby(t) // root, to run the planter as nobody
	file, _ := workloadRecording(t, time.Second)
	bin := rubyperfBinary(t)
	shared, err := os.MkdirTemp("", "rubyperf-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	unfinished := filepath.Join(shared, "rubyperf.data")
	rewriteRecording(t, file, unfinished, recordingRewrite{unfinished: true})
	clean := runMeasured(t, bin, "report", "-i", unfinished)
	if clean.code != 0 {
		t.Fatalf("report of the unfinished recording: exit %d: %s", clean.code, clean.stderr)
	}

	symbols := readback.SymbolsPath(unfinished)
	plant := func(content []byte) {
		t.Helper()
		os.Remove(symbols)
		c := exec.Command("/bin/sh", "-c", `cat > "$1"`, "sh", symbols)
		c.SysProcAttr = nobody()
		c.Stdin = bytes.NewReader(content)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("nobody could not plant %s: %v: %s", symbols, err, out)
		}
		if st, err := os.Stat(symbols); err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Fatalf("%s is not nobody's: %v", symbols, err)
		}
	}

	// A valid table whose names nobody chose: not trusted, not read.
	forged := symtab.New()
	forged.NameID(symtab.FrameInfo{Label: "Forged#by_nobody", Path: "/forged.rb", Line: 1})
	b, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	plant(b)
	got := runMeasured(t, bin, "report", "-i", unfinished)
	checkBombRead(t, clean, got, unfinished, "not finished", symbols+": owned by uid 65534, not uid 0: not trusted")

	// A bomb: refused unread as nobody's; as the recording's owner's (root
	// was handed it), read within the decoder's bounds.
	plant(framesBomb(t, 32<<10))
	got = runMeasured(t, bin, "report", "-i", unfinished)
	checkBombRead(t, clean, got, unfinished, "not finished", symbols+": owned by uid 65534")
	if err := os.Chown(symbols, 0, 0); err != nil {
		t.Fatal(err)
	}
	got = runMeasured(t, bin, "report", "-i", unfinished)
	checkBombRead(t, clean, got, unfinished, "not finished", symbols+": ruby symbol table", "frames entry 1")
}
