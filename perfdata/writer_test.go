package perfdata

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// The process a synthetic file describes: two threads of one process.
const (
	testPid    = 4242
	testTid2   = 4243
	testComm   = "rubytest"
	testComm2  = "worker"
	testEvent  = "ruby-cpu"
	privateBit = Feature(200)
)

// textMapping describes the executable segment of a real ELF file mapped
// at a made-up base, and some of its functions.
type textMapping struct {
	mmap    Mmap2
	buildID []byte     // the file's GNU build id
	funcs   []textFunc // ascending by address
}

type textFunc struct {
	names []string // every symbol name at this address (aliases)
	ip    uint64   // an address inside the function, in the made-up process
}

// mapELF picks a shared library or executable on this machine and maps its
// text segment like the dynamic loader would.
func mapELF(t *testing.T) textMapping {
	t.Helper()
	var path string
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/aarch64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/usr/bin/perf"} {
		if _, err := os.Stat(p); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testskip.IfNotSupported(t, testskip.Missing("libc.so.6 or perf at a path the test knows", "Debian's libc6 or linux-perf", nil))
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
			break
		}
	}
	if text == nil {
		t.Fatalf("%s has no executable segment", path)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[uint64][]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size >= 32 && s.Value >= text.Vaddr && s.Value+s.Size <= text.Vaddr+text.Filesz {
			byAddr[s.Value] = append(byAddr[s.Value], s.Name)
		}
	}
	var addrs []uint64
	for a := range byAddr {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	if len(addrs) < 3 {
		t.Fatalf("%s: only %d functions", path, len(addrs))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	const base = 0x7f1234500000
	page := func(x uint64) uint64 { return x &^ 0xfff }
	m := textMapping{mmap: Mmap2{
		Misc: MiscUser, Pid: testPid, Tid: testPid,
		Addr:  base + page(text.Vaddr),
		Len:   (text.Vaddr + text.Memsz - page(text.Vaddr) + 0xfff) &^ 0xfff,
		Pgoff: page(text.Off),
		Maj:   uint32(st.Dev>>8&0xfff | st.Dev>>32&^0xfff), Min: uint32(st.Dev&0xff | st.Dev>>12&^0xff),
		Ino:  st.Ino,
		Prot: 5, Flags: 2, // PROT_READ|PROT_EXEC, MAP_PRIVATE
		Filename: path,
	}}
	if note := f.Section(".note.gnu.build-id"); note != nil {
		// Elf64_Nhdr: namesz, descsz, type; "GNU\0"; the id.
		if b, err := note.Data(); err == nil && len(b) >= 16 && len(b) >= 16+int(le.Uint32(b[4:])) {
			m.buildID = b[16 : 16+le.Uint32(b[4:])]
		}
	}
	if len(m.buildID) == 0 {
		t.Fatalf("%s has no build id", path)
	}
	for _, i := range []int{len(addrs) / 4, len(addrs) / 2, 3 * len(addrs) / 4} {
		a := addrs[i]
		m.funcs = append(m.funcs, textFunc{names: byAddr[a], ip: base + a + 8})
	}
	return m
}

// testAttr is a bpf-output event as the profiler opens it. Without
// SampleIP, perf 6.1's script refuses to print symbols ("Display of
// symbols requested but neither sample IP nor sample address available")
// and perf report charges every sample to address 0.
func testAttr() Attr {
	return Attr{
		Type: TypeSoftware, Config: CountSWBPFOutput, SamplePeriodOrFreq: 1,
		SampleType:              SampleIP | SampleTID | SampleTime | SampleCPU | SamplePeriod | SampleCallchain | SampleRaw,
		Flags:                   FlagSampleIDAll | FlagExcludeGuest,
		WakeupEventsOrWatermark: 1,
	}
}

// synthetic is a file's worth of records and features.
type synthetic struct {
	attr     Attr
	name     string
	ids      []uint64
	records  []Record
	features map[Feature][]byte
	samples  int
}

// makeSynthetic builds a COMM per thread, the MMAP2 m, n samples whose
// callchains lie in m, and some features, a private one at bit 200.
func makeSynthetic(t *testing.T, m textMapping, n int) synthetic {
	s := synthetic{attr: testAttr(), name: testEvent, ids: []uint64{7}, features: map[Feature][]byte{}}
	tr := func(tid uint32, time uint64) Trailer { return Trailer{Pid: testPid, Tid: tid, Time: time, CPU: 1} }
	s.records = append(s.records,
		&Comm{Misc: MiscCommExec, Pid: testPid, Tid: testPid, Comm: testComm, Trailer: tr(testPid, 1000)},
		&Fork{Pid: testPid, PPid: testPid, Tid: testTid2, PTid: testPid, Time: 1001, Trailer: tr(testTid2, 1001)},
		&Comm{Pid: testPid, Tid: testTid2, Comm: testComm2, Trailer: tr(testTid2, 1002)},
	)
	mm := m.mmap
	mm.Trailer = tr(testPid, 1003)
	s.records = append(s.records, &mm)
	for i := 0; i < n; i++ {
		tid := uint32(testPid)
		if i%3 == 2 {
			tid = testTid2
		}
		payload := []byte(fmt.Sprintf("smp%d", i%10)) // 4 bytes: 4+4 is a multiple of 8
		s.records = append(s.records, &Sample{
			Misc: MiscUser, IP: m.funcs[0].ip, Pid: testPid, Tid: tid, Time: 2_000_000_000 + uint64(i)*1_000_000,
			CPU: uint32(i % 2), Period: 1_000_000,
			Callchain: []uint64{ContextUser, m.funcs[0].ip, m.funcs[1].ip + uint64(i%4), m.funcs[2].ip},
			Raw:       payload,
		})
	}
	s.samples = n
	s.records = append(s.records,
		&Lost{ID: 7, Lost: 3, Trailer: tr(testPid, 2_000_000_000+uint64(n)*1_000_000)},
		&Exit{Pid: testPid, PPid: testPid, Tid: testTid2, PTid: testPid, Time: 3_000_000_000, Trailer: tr(testTid2, 3_000_000_000)},
	)
	s.features[FeatHostname] = EncodeString("testhost")
	s.features[FeatOSRelease] = EncodeString("6.1.0-test")
	s.features[FeatVersion] = EncodeString("rubyperf-test")
	s.features[FeatArch] = EncodeString("x86_64")
	s.features[FeatNRCPUs] = EncodeNRCPUs(NRCPUs{Available: 4, Online: 2})
	s.features[FeatCmdline] = EncodeStrings([]string{"rubyperf", "record", "-p", "4242"})
	ids, err := EncodeBuildIDs([]BuildID{
		{Misc: MiscUser, Pid: -1, ID: bytes.Repeat([]byte{0xab}, 20), Filename: "/nonexistent/lib.so"},
		{Misc: MiscKernel, Pid: -1, ID: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, Filename: "[kernel.kallsyms]"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.features[FeatBuildID] = ids
	s.features[privateBit] = []byte("private rubyperf data, ignored by perf\x00\x01\x02")
	return s
}

// write writes s to a new file at path through a Writer.
func (s *synthetic) write(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddEvent(s.attr, s.name, s.ids); err != nil {
		t.Fatal(err)
	}
	for f, data := range s.features {
		if err := w.SetFeature(f, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, rec := range s.records {
		if err := w.Synthesize(0, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWriterPerf writes a file and has perf 6.1 read it: script, report
// and the header all work, and perf sees what was written.
func TestWriterPerf(t *testing.T) {
	perfBinary(t)
	m := mapELF(t)
	t.Run("inode", func(t *testing.T) { checkWriterPerf(t, m) })
	// The MMAP2 variant that names the file by build id (perf 5.12+).
	m.mmap.BuildID = m.buildID
	m.mmap.Maj, m.mmap.Min, m.mmap.Ino = 0, 0, 0
	t.Run("build-id", func(t *testing.T) { checkWriterPerf(t, m) })
}

func checkWriterPerf(t *testing.T, m textMapping) {
	const n = 25
	s := makeSynthetic(t, m, n)
	path := filepath.Join(t.TempDir(), "synthetic.data")
	s.write(t, path)

	script := runPerf(t, "script", "-i", path)
	t.Logf("perf script:\n%s", firstLines(script, 12))
	// One header line per sample: comm, tid, cpu, time, period, event name.
	header := regexp.MustCompile(`(?m)^\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\d+)\s+(\S+):\s*$`)
	heads := header.FindAllStringSubmatch(script, -1)
	if len(heads) != n {
		t.Fatalf("perf script printed %d sample headers, want %d", len(heads), n)
	}
	for i, h := range heads {
		wantComm, wantTid := testComm, fmt.Sprint(testPid)
		if i%3 == 2 {
			wantComm, wantTid = testComm2, fmt.Sprint(testTid2)
		}
		if h[1] != wantComm || h[2] != wantTid || h[3] != fmt.Sprintf("%03d", i%2) || h[6] != testEvent {
			t.Errorf("sample %d: header %q, want comm %s tid %s cpu %d event %s", i, h[0], wantComm, wantTid, i%2, testEvent)
		}
	}
	// Every frame is resolved to one of the functions, in the mapped file.
	for _, fn := range m.funcs {
		re := regexp.MustCompile(`(?m)^\s+[0-9a-f]+ (` + strings.Join(quoteAll(fn.names), "|") + `)(@@?[\w.]+)?\+0x[0-9a-f]+ \(` + regexp.QuoteMeta(m.mmap.Filename) + `\)$`)
		if got := len(re.FindAllString(script, -1)); got != n {
			t.Errorf("function %v resolved in %d frames, want %d", fn.names, got, n)
		}
	}
	if strings.Contains(script, "[unknown]") {
		t.Errorf("perf script has unresolved frames")
	}
	if got := strings.Count(script, "BPF output:"); got != n {
		t.Errorf("perf script printed %d BPF outputs, want %d", got, n)
	}

	// COMM, FORK and MMAP2 come before the first sample, EXIT after the last.
	events := runPerf(t, "script", "-i", path, "--show-task-events", "--show-mmap-events", "-F", "comm,tid,time,event")
	t.Logf("perf script --show-task-events --show-mmap-events:\n%s", firstLines(events, 8))
	first := strings.Index(events, testEvent)
	for _, want := range []string{"PERF_RECORD_COMM exec: " + testComm, "PERF_RECORD_FORK(", "PERF_RECORD_COMM: " + testComm2, "PERF_RECORD_MMAP2 " + fmt.Sprint(testPid)} {
		if i := strings.Index(events, want); i < 0 || i > first {
			t.Errorf("%q at %d, first sample at %d", want, i, first)
		}
	}
	if i := strings.Index(events, "PERF_RECORD_EXIT("); i < strings.LastIndex(events, testEvent) {
		t.Errorf("EXIT at %d, before the last sample", i)
	}

	report := runPerf(t, "report", "--stdio", "-i", path)
	for _, fn := range m.funcs {
		if !regexp.MustCompile(`\b(` + strings.Join(quoteAll(fn.names), "|") + `)\b`).MatchString(report) {
			t.Errorf("perf report does not mention %v", fn.names)
		}
	}
	if !strings.Contains(report, "of event '"+testEvent+"'") {
		t.Errorf("perf report does not name the event %s:\n%s", testEvent, firstLines(report, 15))
	}

	head := runPerf(t, "report", "--header-only", "-i", path)
	t.Logf("perf report --header-only:\n%s", head)
	for _, want := range []string{
		"# hostname : testhost", "# os release : 6.1.0-test", "# perf version : rubyperf-test",
		"# arch : x86_64", "# nrcpus online : 2", "# nrcpus avail : 4",
		"# cmdline : rubyperf record -p 4242", "# event : name = " + testEvent + ", , id = { 7 }",
	} {
		if !strings.Contains(head, want) {
			t.Errorf("perf report --header-only lacks %q", want)
		}
	}
	if !strings.Contains(runPerf(t, "buildid-list", "-i", path), strings.Repeat("ab", 20)+" /nonexistent/lib.so") {
		t.Errorf("perf buildid-list does not list the build id")
	}
	if stats := perfStats(t, path); stats["SAMPLE"] != n || stats["COMM"] != 2 || stats["MMAP2"] != 1 || stats["FORK"] != 1 || stats["EXIT"] != 1 || stats["LOST"] != 1 {
		t.Errorf("perf report --stats: %v", stats)
	}
}

// TestWriterRoundTrip reads back what the Writer wrote: the same event,
// records and features.
func TestWriterRoundTrip(t *testing.T) {
	m := textMapping{mmap: Mmap2{Misc: MiscUser, Pid: testPid, Tid: testPid, Addr: 0x7f0000000000, Len: 0x10000,
		Maj: 8, Min: 1, Ino: 1234, Prot: 5, Flags: 2, Filename: "/usr/lib/libfake.so"},
		funcs: []textFunc{{ip: 0x7f0000001000}, {ip: 0x7f0000002000}, {ip: 0x7f0000003000}}}
	s := makeSynthetic(t, m, 10)
	s.records = append(s.records,
		&Mmap2{Misc: MiscUser | MiscMmapBuildID, Pid: 1, Tid: 2, Addr: 3, Len: 4, Pgoff: 5, BuildID: []byte{1, 2, 3},
			Prot: 5, Flags: 2, Filename: "/by/build-id", Trailer: Trailer{Pid: 1, Tid: 2, Time: 9, CPU: 3}},
		&Mmap{Misc: MiscKernel, Pid: ^uint32(0), Addr: 0xffffffff81000000, Len: 0x1000000, Pgoff: 0xffffffff81000000,
			Filename: "[kernel.kallsyms]_text", Trailer: Trailer{Time: 10}},
		&FinishedRound{},
		&Unknown{Raw: []byte{byte(RecordSwitch), 0, 0, 0, 0, 0x20, 32, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0}},
	)
	path := filepath.Join(t.TempDir(), "rt.data")
	s.write(t, path)

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantAttr := s.attr
	wantAttr.Size = AttrSize
	if want := []Event{{Attr: wantAttr, Name: s.name, IDs: s.ids}}; !reflect.DeepEqual(r.Events(), want) {
		t.Errorf("events %+v, want %+v", r.Events(), want)
	}
	got := readAll(t, r)
	if len(got) != len(s.records) {
		t.Fatalf("read %d records, wrote %d", len(got), len(s.records))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], s.records[i]) {
			t.Errorf("record %d: read %+v, wrote %+v", i, got[i], s.records[i])
		}
	}
	desc, err := EncodeEventDesc([]Event{{Attr: wantAttr, Name: s.name, IDs: s.ids}})
	if err != nil {
		t.Fatal(err)
	}
	s.features[FeatEventDesc] = desc
	if len(r.Features()) != len(s.features) {
		t.Errorf("features %v, wrote %d", r.Features(), len(s.features))
	}
	for f, want := range s.features {
		if got, ok := r.Feature(f); !ok || !bytes.Equal(got, want) {
			t.Errorf("feature %v: read %q, wrote %q", f, got, want)
		}
	}
	checkDecodedFeatures(t, r)
}

// checkDecodedFeatures decodes the typed features of makeSynthetic.
func checkDecodedFeatures(t *testing.T, r *Reader) {
	t.Helper()
	str := func(f Feature) string {
		b, _ := r.Feature(f)
		s, err := DecodeString(b)
		if err != nil {
			t.Errorf("%v: %v", f, err)
		}
		return s
	}
	if h, o, v, a := str(FeatHostname), str(FeatOSRelease), str(FeatVersion), str(FeatArch); h != "testhost" || o != "6.1.0-test" || v != "rubyperf-test" || a != "x86_64" {
		t.Errorf("strings %q %q %q %q", h, o, v, a)
	}
	b, _ := r.Feature(FeatNRCPUs)
	if n, err := DecodeNRCPUs(b); err != nil || n != (NRCPUs{Available: 4, Online: 2}) {
		t.Errorf("nrcpus %+v %v", n, err)
	}
	b, _ = r.Feature(FeatCmdline)
	if c, err := DecodeStrings(b); err != nil || strings.Join(c, " ") != "rubyperf record -p 4242" {
		t.Errorf("cmdline %q %v", c, err)
	}
	b, _ = r.Feature(FeatBuildID)
	ids, err := DecodeBuildIDs(b)
	if err != nil || len(ids) != 2 || ids[0].Filename != "/nonexistent/lib.so" || ids[0].Misc != MiscUser || ids[0].Pid != -1 ||
		!bytes.Equal(ids[0].ID, bytes.Repeat([]byte{0xab}, 20)) || ids[1].Misc != MiscKernel || len(ids[1].ID) != 16 {
		t.Errorf("build ids %+v %v", ids, err)
	}
	b, _ = r.Feature(FeatEventDesc)
	if evs, err := DecodeEventDesc(b); err != nil || len(evs) != 1 || evs[0].Name != testEvent || !reflect.DeepEqual(evs[0].IDs, []uint64{7}) {
		t.Errorf("event desc %+v %v", evs, err)
	}
}

func quoteAll(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return q
}

func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "")
}
