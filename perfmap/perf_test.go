package perfmap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// The tests here check the maps against the installed perf, which reads
// only /tmp/perf-<pid>.map: they write there, for pids no process can
// have, and remove the files.

// perfBinary returns the path of perf, skipping the test without it under
// internal/testskip's rule.
func perfBinary(t *testing.T) string {
	t.Helper()
	return testskip.Command(t, "perf", "linux-perf")
}

// unusedPid returns a pid above PID_MAX_LIMIT (2^22), which no process can
// have, whose map does not exist in /tmp, and removes the map at the end.
func unusedPid(t *testing.T) int {
	t.Helper()
	for range 100 {
		pid := 1<<22 + rand.IntN(1<<24)
		path := Path("", pid)
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			t.Cleanup(func() { os.Remove(path) })
			return pid
		}
	}
	t.Fatal("no unused pid")
	return 0
}

// jitRange is where the fake YJIT's code lives: a canonical user address.
const (
	jitStart = 0x7f8a3c000000
	jitLen   = 0x100000
)

// sample is one sample to write: its IP and, if the event has callchains,
// its user callchain (leaf first).
type sample struct {
	ip    uint64
	chain []uint64
}

// writePerfData writes a perf.data for pid: a COMM, an executable //anon
// MMAP2 per range, and the samples, all for the one thread.
//
// It encodes the minimal file perf 6.1 reads (reference/perf-formats.md
// §1.6) itself rather than with package perfdata, which perfmap may not
// import, tests included (internal/archtest): a 104-byte header, one
// 128-byte attr with an empty ids section, no feature sections, and
// records whose sample_id trailer is TID and TIME.
func writePerfData(t *testing.T, pid int, ranges [][2]uint64, callchains bool, samples []sample) string {
	t.Helper()
	const (
		headerSize = 104
		attrSize   = 128
		recComm    = 3
		recSample  = 9
		recMmap2   = 10
		miscUser   = 2
		sampleIP   = 1 << 0
		sampleTID  = 1 << 1
		sampleTime = 1 << 2
		sampleCC   = 1 << 5
	)
	le := binary.LittleEndian
	u32, u64 := le.AppendUint32, le.AppendUint64
	str := func(b []byte, s string) []byte { // NUL-terminated, padded to 8
		b = append(b, s...)
		return append(b, make([]byte, 8-len(s)%8)...)
	}
	p := uint32(pid)
	record := func(typ uint32, body []byte) []byte {
		b := u32(nil, typ)
		b = le.AppendUint16(b, miscUser)
		b = le.AppendUint16(b, uint16(8+len(body)))
		return append(b, body...)
	}
	trailer := func(b []byte, time uint64) []byte { return u64(u32(u32(b, p), p), time) }

	var data []byte
	data = append(data, record(recComm, trailer(str(u32(u32(nil, p), p), "ruby"), 1000))...)
	for i, r := range ranges {
		b := u64(u64(u64(u32(u32(nil, p), p), r[0]), r[1]), 0) // addr, len, pgoff
		b = u64(u64(u32(u32(b, 0), 0), 0), 0)                  // maj, min, ino, ino_generation
		b = u32(u32(b, syscall.PROT_READ|syscall.PROT_EXEC), syscall.MAP_PRIVATE)
		data = append(data, record(recMmap2, trailer(str(b, "//anon"), 1001+uint64(i)))...)
	}
	sampleType := uint64(sampleIP | sampleTID | sampleTime)
	if callchains {
		sampleType |= sampleCC
	}
	for i, s := range samples {
		b := u64(u32(u32(u64(nil, s.ip), p), p), 2_000_000_000+uint64(i)*1000)
		if callchains {
			b = u64(b, uint64(1+len(s.chain)))
			b = u64(b, contextUser)
			for _, ip := range s.chain {
				b = u64(b, ip)
			}
		}
		data = append(data, record(recSample, b)...)
	}

	attr := make([]byte, attrSize)
	le.PutUint32(attr[0:], 1)                     // type: PERF_TYPE_SOFTWARE
	le.PutUint32(attr[4:], attrSize)              // size
	le.PutUint64(attr[8:], 0)                     // config: PERF_COUNT_SW_CPU_CLOCK
	le.PutUint64(attr[16:], 1)                    // sample_period
	le.PutUint64(attr[24:], sampleType)           // sample_type
	le.PutUint64(attr[40:], 1<<18|1<<5)           // sample_id_all, exclude_kernel
	fileAttr := append(attr, make([]byte, 16)...) // ids section: none

	h := u64(nil, 0x32454c4946524550) // "PERFILE2"
	h = u64(h, headerSize)
	h = u64(h, uint64(len(fileAttr)))
	h = u64(u64(h, headerSize), uint64(len(fileAttr)))                   // attrs
	h = u64(u64(h, headerSize+uint64(len(fileAttr))), uint64(len(data))) // data
	h = u64(u64(h, 0), 0)                                                // event_types
	h = append(h, make([]byte, 32)...)                                   // feature bits: none

	path := filepath.Join(t.TempDir(), "perf.data")
	if err := os.WriteFile(path, slices.Concat(h, fileAttr, data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// contextUser is PERF_CONTEXT_USER, the callchain marker before user frames.
const contextUser = 1<<64 - 512

// perfScript runs perf script -F ip,sym and returns its lines as
// [ip, symbol] pairs, callchain frames included.
func perfScript(t *testing.T, data string) [][2]string {
	t.Helper()
	cmd := exec.Command(perfBinary(t), "script", "-i", data, "-F", "ip,sym")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "PAGER=cat")
	if err := cmd.Run(); err != nil {
		t.Fatalf("perf script: %v\n%s", err, stderr.String())
	}
	var got [][2]string
	for _, l := range strings.Split(out.String(), "\n") {
		ip, sym, ok := strings.Cut(strings.TrimSpace(l), " ")
		if ok {
			got = append(got, [2]string{ip, sym})
		}
	}
	return got
}

func hex(x uint64) string { return strconv.FormatUint(x, 16) }

// TestPerfReadsMap: perf script names samples in synthetic ranges from a
// map written by WriteSynthetic beside a JIT's lines, and the JIT's
// samples from its own lines.
func TestPerfReadsMap(t *testing.T) {
	perfBinary(t)
	pid := unusedPid(t)
	path := Path("", pid)
	// What --yjit-perf wrote, with a line it is still writing.
	jit := "7f8a3c00a000 40 [JIT] Integer#times\n7f8a3c00a040 80 [JIT] block in <main>\n7f8a3c00b000 4"
	if err := os.WriteFile(path, []byte(jit), 0o644); err != nil {
		t.Fatal(err)
	}
	in := frames("", 20, 16)
	got, base, err := WriteSynthetic("", pid, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got != fmt.Sprintf("/tmp/perf-%d.map", pid) {
		t.Fatalf("path %s", got)
	}
	ranges := [][2]uint64{{jitStart, jitLen}, {base, alignUp(20 * 16)}}

	t.Run("ip", func(t *testing.T) {
		var samples []sample
		want := map[string]string{}
		for _, i := range []int{0, 1, 7, 19} {
			ip := base + in[i].Start + 3
			samples = append(samples, sample{ip: ip})
			want[hex(ip)] = in[i].Name
		}
		samples = append(samples, sample{ip: 0x7f8a3c00a010}, sample{ip: 0x7f8a3c00a0b0}, sample{ip: base + 20*16 + 1})
		want[hex(0x7f8a3c00a010)] = "[JIT] Integer#times"
		want[hex(0x7f8a3c00a0b0)] = "[JIT] block in <main>"
		want[hex(base+20*16+1)] = "[unknown]" // in the mapping, past every symbol
		out := perfScript(t, writePerfData(t, pid, ranges, false, samples))
		if len(out) != len(samples) {
			t.Fatalf("perf script printed %d samples, want %d: %q", len(out), len(samples), out)
		}
		for _, l := range out {
			if want[l[0]] != l[1] {
				t.Errorf("ip %s: perf says %q, want %q", l[0], l[1], want[l[0]])
			}
		}
	})

	t.Run("callchain", func(t *testing.T) {
		// A JIT leaf called from three Ruby frames: how rubyperf merges.
		chain := []uint64{0x7f8a3c00a001, base + in[2].Start, base + in[5].Start + 15, base + in[0].Start + 8}
		names := []string{"[JIT] Integer#times", in[2].Name, in[5].Name, in[0].Name}
		out := perfScript(t, writePerfData(t, pid, ranges, true, []sample{{ip: chain[0], chain: chain}}))
		// One line per frame; a frame at a symbol's first byte is that
		// symbol (perf 6.1 does not look up return addresses less one).
		if len(out) != len(chain) {
			t.Fatalf("perf script printed %q", out)
		}
		for i, l := range out {
			if l[0] != hex(chain[i]) || l[1] != names[i] {
				t.Errorf("frame %d: %q, want %x %q", i, l, chain[i], names[i])
			}
		}
	})
}

// TestPerfMapQuirks keeps the perf 6.1 facts the package relies on true
// for the installed perf: names shorter than 3 bytes are ignored (so
// Append refuses them), a last line without a newline loses its last byte
// (so every line written ends with one), and a 0x prefix, tabs and leading
// blanks are accepted (so Parse accepts them).
func TestPerfMapQuirks(t *testing.T) {
	perfBinary(t)
	pid := unusedPid(t)
	b := Floor
	text := fmt.Sprintf("%x 10 abc\n%x 10 ab\n0x%x 0x10 zjit::foo\n%x\t10\ttabs\n  %x 10 blanks\n%x 10 nonl",
		b, b+0x10, b+0x20, b+0x30, b+0x40, b+0x50)
	if err := os.WriteFile(Path("", pid), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var samples []sample
	for i := range 6 {
		samples = append(samples, sample{ip: b + uint64(i)*0x10 + 1})
	}
	out := perfScript(t, writePerfData(t, pid, [][2]uint64{{b, 0x1000}}, false, samples))
	want := []string{"abc", "[unknown]", "zjit::foo", "tabs", "blanks", "non"}
	if len(out) != len(want) {
		t.Fatalf("perf script printed %q", out)
	}
	for i, l := range out {
		if l[1] != want[i] {
			t.Errorf("line %d: perf says %q, want %q", i, l[1], want[i])
		}
	}
	// Parse agrees except where perf drops or cuts.
	got, err := ReadFile(Path("", pid))
	if err != nil || len(got) != 6 || got[1].Name != "ab" || got[5].Name != "nonl" {
		t.Fatalf("Parse: %v %v", got, err)
	}
}
