package perfdata

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// workload is the program perf records: a shell loop of about 0.3 s.
var workload = []string{"/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"}

// perfRecord runs `perf record args -- workload` and returns the output
// file. When perf_event_open is refused it skips the test under
// internal/testskip's rule.
func perfRecord(t *testing.T, pipe bool, args ...string) string {
	t.Helper()
	perf := perfBinary(t)
	out := filepath.Join(t.TempDir(), "perf.data")
	o := out
	if pipe {
		o = "-"
	}
	cmd := exec.Command(perf, append(append([]string{"record", "-o", o}, args...), append([]string{"--"}, workload...)...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if pipe {
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdout = f
	}
	if err := cmd.Run(); err != nil {
		msg := stderr.String()
		// perf's stderr is all there is to tell a refusal of perf_event_open by.
		for _, refused := range []string{"perf_event_paranoid", "ermission", "not permitted", "Access to performance monitoring"} {
			if strings.Contains(msg, refused) {
				testskip.Privileged(t, fmt.Errorf("perf record: %w: %s", fs.ErrPermission, msg))
			}
		}
		t.Fatalf("perf record %v: %v\n%s", args, err, msg)
	}
	return out
}

// stockCounts reads every record of r and counts them by perf's name.
func stockCounts(t *testing.T, r *Reader) (map[string]int, []*Sample) {
	t.Helper()
	counts := map[string]int{}
	var samples []*Sample
	for _, rec := range readAll(t, r) {
		counts[rec.Type().String()]++
		if s, ok := rec.(*Sample); ok {
			samples = append(samples, s)
		}
	}
	return counts, samples
}

// checkAgainstPerf compares what the Reader sees in path with what perf
// reports: the count of every record type, the samples perf script
// prints, the event names and the header's features.
func checkAgainstPerf(t *testing.T, path string, r *Reader) []*Sample {
	t.Helper()
	counts, samples := stockCounts(t, r)
	stats := perfStats(t, path)
	t.Logf("perf report --stats %v; read %v", stats, counts)
	if len(samples) == 0 {
		t.Fatal("no samples")
	}
	for name, n := range stats {
		switch name {
		case "TOTAL":
			continue
		case "ATTR", "FEATURE", "EVENT_UPDATE": // folded into Events and Feature in pipe mode
			if !r.Pipe() {
				t.Errorf("perf counts %d %s records in a file-mode perf.data", n, name)
			}
			continue
		}
		if counts[name] != n {
			t.Errorf("%s records: read %d, perf counts %d", name, counts[name], n)
		}
	}
	if stats["ATTR"] > 0 && stats["ATTR"] != len(r.Events()) {
		t.Errorf("%d events from %d HEADER_ATTR records", len(r.Events()), stats["ATTR"])
	}
	if n := perfScriptSamples(t, path); n != len(samples) {
		t.Errorf("read %d samples, perf script prints %d", len(samples), n)
	}
	names := strings.Fields(runPerf(t, "evlist", "-i", path))
	var got []string
	for _, e := range r.Events() {
		got = append(got, e.Name)
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("event names %q, perf evlist %q", got, names)
	}
	for _, s := range samples {
		if s.Event != 0 {
			t.Fatalf("sample of event %d: %+v", s.Event, s)
		}
	}

	// Features, against perf report --header-only and perf buildid-list.
	head := runPerf(t, "report", "--header-only", "-i", path)
	for f, label := range map[Feature]string{FeatHostname: "hostname", FeatOSRelease: "os release", FeatVersion: "perf version", FeatArch: "arch"} {
		b, ok := r.Feature(f)
		if !ok {
			t.Errorf("no %v feature", f)
			continue
		}
		s, err := DecodeString(b)
		if err != nil || !strings.Contains(head, "# "+label+" : "+s+"\n") {
			t.Errorf("%v %q (%v) not in the header:\n%s", f, s, err, head)
		}
	}
	b, _ := r.Feature(FeatNRCPUs)
	if n, err := DecodeNRCPUs(b); err != nil || !strings.Contains(head, fmt.Sprintf("# nrcpus online : %d\n# nrcpus avail : %d\n", n.Online, n.Available)) {
		t.Errorf("nrcpus %+v %v", n, err)
	}
	b, _ = r.Feature(FeatCmdline)
	if c, err := DecodeStrings(b); err != nil || !strings.Contains(head, "# cmdline : "+strings.Join(c, " ")+" \n") {
		t.Errorf("cmdline %q %v", c, err)
	}
	if b, ok := r.Feature(FeatBuildID); ok {
		ids, err := DecodeBuildIDs(b)
		if err != nil {
			t.Error(err)
		}
		var lines []string
		for _, id := range ids {
			lines = append(lines, hex.EncodeToString(id.ID)+" "+id.Filename)
		}
		want := strings.TrimSpace(runPerf(t, "buildid-list", "-i", path))
		if got := strings.Join(lines, "\n"); got != want {
			t.Errorf("build ids:\n%s\nperf buildid-list:\n%s", got, want)
		}
	}
	return samples
}

// checkFramePointerSamples checks the callchains of `perf record -g`:
// each starts with a context marker and holds user addresses.
func checkFramePointerSamples(t *testing.T, samples []*Sample) {
	t.Helper()
	withUser := 0
	for _, s := range samples {
		if len(s.Callchain) == 0 || s.Callchain[0] < ContextMax {
			t.Fatalf("callchain %#x does not start with a context marker", s.Callchain)
		}
		for i, ip := range s.Callchain {
			if ip == ContextUser && i+1 < len(s.Callchain) {
				withUser++
				break
			}
		}
		if s.Pid == 0 || s.Time == 0 || s.Period == 0 {
			t.Errorf("sample %+v", s)
		}
	}
	if withUser < len(samples)/2 {
		t.Errorf("only %d of %d callchains have user frames", withUser, len(samples))
	}
}

func TestStockPerfFramePointer(t *testing.T) {
	path := perfRecord(t, false, "-F", "999", "-g")
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Pipe() {
		t.Fatal("file mode read as pipe mode")
	}
	checkFramePointerSamples(t, checkAgainstPerf(t, path, r))
}

func TestStockPerfDwarf(t *testing.T) {
	const stack = 8192
	path := perfRecord(t, false, "-F", "999", "--call-graph", fmt.Sprintf("dwarf,%d", stack))
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a := r.Events()[0].Attr
	if a.SampleType&(SampleRegsUser|SampleStackUser) != SampleRegsUser|SampleStackUser || a.SampleStackUser != stack {
		t.Fatalf("attr %+v lacks dwarf unwinding fields", a)
	}
	samples := checkAgainstPerf(t, path, r)
	nregs := bits.OnesCount64(a.SampleRegsUser)
	withStack := 0
	for _, s := range samples {
		switch s.RegsUserABI {
		case RegsABINone:
			if len(s.RegsUser) != 0 {
				t.Errorf("%d registers with ABI none", len(s.RegsUser))
			}
		case RegsABI64:
			if len(s.RegsUser) != nregs {
				t.Fatalf("%d user registers, mask %#x has %d", len(s.RegsUser), a.SampleRegsUser, nregs)
			}
		default:
			t.Fatalf("user register ABI %d", s.RegsUserABI)
		}
		if s.StackUserSize != stack || len(s.StackUser) > stack {
			t.Fatalf("user stack %d of %d bytes, want at most %d of %d", len(s.StackUser), s.StackUserSize, stack, stack)
		}
		if s.RegsUserABI == RegsABI64 && len(s.StackUser) > 0 {
			withStack++
		}
	}
	if withStack < len(samples)*9/10 {
		t.Errorf("only %d of %d samples have user registers and stack", withStack, len(samples))
	}
	if runtime.GOARCH != "amd64" || a.SampleRegsUser&(1<<8) == 0 {
		return
	}
	// The user IP register (PERF_REG_X86_IP, bit 8) lies in a mapping of
	// the process: the registers are decoded in the right order.
	r2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	var maps []*Mmap2
	for _, rec := range readAll(t, r2) {
		if m, ok := rec.(*Mmap2); ok {
			maps = append(maps, m)
		}
	}
	ipIndex := bits.OnesCount64(a.SampleRegsUser & (1<<8 - 1))
	inMap := 0
	for _, s := range samples {
		if s.RegsUserABI != RegsABI64 {
			continue
		}
		ip := s.RegsUser[ipIndex]
		for _, m := range maps {
			if m.Pid == s.Pid && ip >= m.Addr && ip-m.Addr < m.Len {
				inMap++
				break
			}
		}
	}
	if inMap < withStack*9/10 {
		t.Errorf("the user IP of only %d of %d samples lies in a mapping", inMap, withStack)
	}
}

// TestStockPerfPipe reads `perf record -o -` output from a plain stream
// and from the file, with the same result.
func TestStockPerfPipe(t *testing.T) {
	path := perfRecord(t, true, "-F", "999", "-g")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stream, err := NewPipeReader(struct{ io.Reader }{f}) // no ReaderAt, no Seeker
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Pipe() || len(stream.Events()) != 1 {
		t.Fatalf("pipe %v, %d events", stream.Pipe(), len(stream.Events()))
	}
	samples := checkAgainstPerf(t, path, stream)
	checkFramePointerSamples(t, samples)

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, again := stockCounts(t, r)
	if len(again) != len(samples) || !r.Pipe() {
		t.Errorf("Open read %d samples (pipe %v), the stream %d", len(again), r.Pipe(), len(samples))
	}

	// A file-mode perf.data is refused on a stream, with a reason.
	if _, err := NewPipeReader(bytes.NewReader(mustWriterFile(t))); err == nil || !strings.Contains(err.Error(), "random access") {
		t.Errorf("NewPipeReader on file mode: %v", err)
	}
}

// mustWriterFile returns a small file-mode perf.data from the Writer.
func mustWriterFile(t *testing.T) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "writer.data"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
