package rubystack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// Replay fixtures let CI test Rubies it cannot build (versions without a
// Debian package, built by hand with scripts/mirror-rubies.sh): for each
// version and scenario, testdata/replay/VERSION/ holds
//
//	SCENARIO.mem          the memory a snapshot read, at the moment every thread was parked
//	SCENARIO.oracle.json  Ruby's own answer for each thread (oracle.rb), from the same moment
//	layout-ARCH.json      the layout read from that build's DWARF by rubyperf's own code,
//	                      used until a built-in table covers the version
//
// TestRecordReplayFixtures -update writes them from the local flavors;
// TestReplayFixtures replays them through the same walker, without any Ruby.
const replayDir = "testdata/replay"

// replayVersions are the versions that must have fixtures: the local flavors'.
var replayVersions = []string{"3.2.11", "4.0.5"}

// savedLayout is a layout-ARCH.json: the raw structs and constants a Layout
// is resolved from, kept to the members the Layout reads.
type savedLayout struct {
	Version   string            `json:"version"`
	Arch      string            `json:"arch"`
	Source    string            `json:"source"`
	Structs   rubybuild.Structs `json:"structs"`
	Constants map[string]int64  `json:"constants"`
}

func newSavedLayout(l *rubybuild.Layout, source string) savedLayout {
	in := l.TableInput().Trimmed()
	return savedLayout{Version: l.Version.String(), Arch: l.Arch, Source: source, Structs: in.Structs,
		Constants: in.Constants}
}

// fixtureLayout is the layout a replay uses: the built-in table of the
// version when there is one, else the fixture's saved layout.
func fixtureLayout(t *testing.T, dir, version, arch string) *rubybuild.Layout {
	t.Helper()
	if l, err := rubybuild.BuiltinLayout(version, arch); err == nil {
		return l
	}
	path := filepath.Join(dir, "layout-"+arch+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no built-in layout for %s/%s and no saved one: %v", version, arch, err)
	}
	var sl savedLayout
	if err := json.Unmarshal(b, &sl); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	v, err := rubybuild.ParseVersion(sl.Version)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if sl.Version != version || sl.Arch != arch {
		t.Fatalf("%s is for %s/%s, the snapshot for %s/%s", path, sl.Version, sl.Arch, version, arch)
	}
	in := rubybuild.TableInput{Version: v, Arch: sl.Arch, Structs: sl.Structs, Constants: sl.Constants}
	l, err := in.Resolve("fixture:" + path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestReplayFixtures walks every committed fixture and compares each
// thread's stack with Ruby's answer recorded at the same moment, frame by
// frame: no Ruby, no process, no DWARF needed.
func TestReplayFixtures(t *testing.T) {
	for _, version := range replayVersions {
		for _, sc := range scenarios {
			if !sc.replayed {
				continue
			}
			t.Run(version+"/"+sc.name, func(t *testing.T) {
				dir := filepath.Join(replayDir, version)
				f, err := os.Open(filepath.Join(dir, sc.name+".mem"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				m, err := LoadMemory(f)
				if err != nil {
					t.Fatal(err)
				}
				if m.Header.Version != version {
					t.Fatalf("snapshot of Ruby %s in the %s fixtures", m.Header.Version, version)
				}
				answers := loadAnswers(t, filepath.Join(dir, sc.name+".oracle.json"))
				if len(answers) != sc.threads {
					t.Fatalf("recorded oracle has %d threads, want %d", len(answers), sc.threads)
				}
				l := fixtureLayout(t, dir, version, m.Header.Arch)
				r := ReplayReader(m, l)
				stacks, err := r.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				compareWithOracle(t, stacks, answers, sc.threads)
				if r.Stats.UnknownFrames != 0 {
					t.Errorf("%d unknown frames", r.Stats.UnknownFrames)
				}
				t.Logf("layout %s: %d threads, %d frames equal to Ruby's", l.Source, len(stacks), countFrames(stacks))
			})
		}
	}
}

func compareWithOracle(t *testing.T, stacks []ThreadStack, answers map[int]oracleAnswer, threads int) {
	t.Helper()
	if len(stacks) != threads {
		t.Errorf("snapshot has %d threads, want %d", len(stacks), threads)
	}
	for _, s := range stacks {
		want, ok := answers[s.TID]
		if !ok {
			t.Errorf("thread %d %q: no oracle answer", s.TID, s.Name)
			continue
		}
		compareFrames(t, fmt.Sprintf("thread %d %q", s.TID, s.Name), s.Frames, want)
	}
}

func loadAnswers(t *testing.T, path string) map[int]oracleAnswer {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list []oracleAnswer
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[int]oracleAnswer{}
	for _, a := range list {
		out[a.TID] = a
	}
	return out
}

// TestRecordReplayFixtures records, on each local flavor that is built, a
// snapshot of every scenario with Ruby's answer, checks that the recording
// and its replay both equal that answer, and with -update writes them as the
// fixtures TestReplayFixtures reads.
func TestRecordReplayFixtures(t *testing.T) {
	for _, r := range localRubies(t) {
		dir := filepath.Join(replayDir, r.Version)
		for _, sc := range scenarios {
			t.Run(r.Name+"/"+sc.name, func(t *testing.T) {
				cmd, answers := startScenario(t, r, sc.name)
				pid := cmd.Process.Pid
				parkedSnapshot(t, pid)

				p, err := OpenProcess(pid, rubybuild.OpenOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				pm := &ProcessMemory{PID: pid}
				defer pm.Close()
				rec := &RecordingMemory{Inner: pm}
				rd, err := NewReader(p, rec)
				if err != nil {
					t.Fatal(err)
				}
				rd.mem.exact = true // record the walk's own reads, not whole pages
				recorded, err := rd.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				compareWithOracle(t, recorded, answers, sc.threads)

				var mem bytes.Buffer
				if err := rec.Save(&mem, rd.SavedHeader()); err != nil {
					t.Fatal(err)
				}
				saved, err := LoadMemory(bytes.NewReader(mem.Bytes()))
				if err != nil {
					t.Fatal(err)
				}
				replayed, err := ReplayReader(saved, rd.Layout).Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				compareWithOracle(t, replayed, answers, sc.threads)
				t.Logf("%d bytes of memory snapshot, %d frames", mem.Len(), countFrames(recorded))
				if !*update || t.Failed() {
					return
				}
				writeFixture(t, dir, sc.name, rd.Layout, p.Binary, mem.Bytes(), answers)
			})
		}
	}
}

func writeFixture(t *testing.T, dir, scenario string, l *rubybuild.Layout, bin *rubybuild.Binary, mem []byte, answers map[int]oracleAnswer) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.Source, "dwarf:") {
		t.Fatalf("layout from %s: fixtures keep a layout read from DWARF", l.Source)
	}
	source := fmt.Sprintf("DWARF of %s (build-id %s)", filepath.Base(bin.Path), bin.BuildID)
	lj, err := json.MarshalIndent(newSavedLayout(l, source), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	list := make([]oracleAnswer, 0, len(answers))
	for _, a := range answers {
		list = append(list, a)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].TID < list[j].TID })
	oj, err := answersJSON(list)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"layout-" + l.Arch + ".json": append(lj, '\n'),
		scenario + ".oracle.json":    oj,
		scenario + ".mem":            mem,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// answersJSON writes oracle answers as a JSON array, one frame a line.
func answersJSON(list []oracleAnswer) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteString("[")
	for i, a := range list {
		if i > 0 {
			buf.WriteString(",")
		}
		fmt.Fprintf(&buf, "\n{\"tid\": %d, \"frames\": [", a.TID)
		for j, f := range a.Frames {
			if j > 0 {
				buf.WriteString(",")
			}
			buf.WriteString("\n  ")
			if err := enc.Encode(f); err != nil {
				return nil, err
			}
			buf.Truncate(buf.Len() - 1) // Encode's newline
		}
		buf.WriteString("\n]}")
	}
	buf.WriteString("\n]\n")
	return buf.Bytes(), nil
}
