package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// rubyCounts is what testdata/ruby/heap.rb writes: ObjectSpace's counts by
// type (count_objects) and by class name (each_object, Object#class).
type rubyCounts struct {
	Types   map[string]uint64 `json:"types"`
	Classes map[string]uint64 `json:"classes"`
	// Memsize sums ObjectSpace.memsize_of over the objects of String,
	// Array, Hash, HeapWide and HeapComplex (by exact class).
	Memsize map[string]uint64 `json:"memsize"`
}

// heapJSON runs `rubyperf heap` with args on pid and decodes its document.
func heapJSON(t *testing.T, pid int, args ...string) heapDoc {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"heap", "-p", strconv.Itoa(pid), "--format", "json"}, args...)
	if code := run(args, &stdout, &stderr); code != 0 {
		testskip.Privileged(t, fmt.Errorf("exit %d: %w", code, reportedError(stderr.String())))
	}
	var doc heapDoc
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("heap --format json: %v\n%s", err, stdout.String())
	}
	return doc
}

// TestHeapCensusEqualsObjectSpace: on every test Ruby, a census of a
// stopped process counts each type as ObjectSpace.count_objects and each
// of the top 50 classes as ObjectSpace.each_object does, counted by the
// process itself just before and just after the census. Between the two it
// allocates nothing but what its pause costs; where its counts agree, the
// census must equal them, and otherwise lie between them.
func TestHeapCensusEqualsObjectSpace(t *testing.T) {
	script, err := testruby.RepoPath("testdata/ruby/heap.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "counts.json")
			cmd := exec.Command(r.Exe, script, out)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd, _ = testruby.StartCommand(t, cmd)
			doc := heapJSON(t, cmd.Process.Pid, "--stop")
			stdin.Write([]byte{'x'})
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the Ruby after the census: %v", err)
			}
			var counts struct {
				Before, After rubyCounts
				Book          uint64 // the memsize of the counting's own hashes when the census ran
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &counts); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			c := doc.Census
			t.Logf("Ruby %s: %d pages, %d slots, %d free, %d classes, %.1f ms stopped", doc.Version, c.Pages, c.Slots,
				c.FreeSlots, len(c.ByClass), doc.TookMS)
			if c.UnreadPages != 0 || c.UnnamedClass != 0 {
				t.Errorf("a stopped process: %d pages unread, %d objects' classes unnamed", c.UnreadPages, c.UnnamedClass)
			}
			census := func(k string) uint64 {
				switch k {
				case "TOTAL":
					return c.Slots
				case "FREE":
					return c.FreeSlots
				}
				return c.ByType[k].Objects
			}
			for k, before := range counts.Before.Types {
				if k == "TOTAL" || k == "FREE" {
					continue // a page may come between: their difference, the live objects, is checked
				}
				checkBetween(t, "count_objects "+k, census(k), before, counts.After.Types[k])
			}
			live := func(c rubyCounts) uint64 { return c.Types["TOTAL"] - c.Types["FREE"] }
			checkBetween(t, "count_objects TOTAL-FREE", c.Slots-c.FreeSlots, live(counts.Before), live(counts.After))
			for k, n := range c.ByType {
				if _, ok := counts.Before.Types[k]; !ok {
					t.Errorf("census type %s (%d objects): count_objects has none", k, n.Objects)
				}
			}
			type named struct {
				name string
				n    uint64
			}
			var top []named
			for k, n := range counts.Before.Classes {
				top = append(top, named{k, n})
			}
			slices.SortFunc(top, func(x, y named) int { return int(y.n) - int(x.n) })
			top = top[:min(50, len(top))]
			for _, k := range top {
				checkBetween(t, "class "+k.name, c.ByClass[k.name].Objects, k.n, counts.After.Classes[k.name])
			}
			// Bytes beyond the slots: every string's and array's own
			// buffer, every hash's table and objects' instance variables
			// beyond their slots (HeapWide: too many; HeapComplex: in a
			// hash table from 3.2), as memsize_of counts them, but not the instance
			// variables a few strings carry outside (FL_EXIVAR): the census
			// may be short of Ruby's sum by those (0.01% here), never over.
			for _, k := range []string{"String", "Array", "Hash", "HeapWide", "HeapComplex"} {
				n := c.ByClass[k]
				got, lo, hi := n.Bytes+n.OffSlot, min(counts.Before.Memsize[k], counts.After.Memsize[k]), max(counts.Before.Memsize[k], counts.After.Memsize[k])
				if k == "Hash" {
					lo, hi = lo+counts.Book, hi+counts.Book
				}
				t.Logf("%s: memsize %d of Ruby's %d (%d beyond the slots)", k, got, hi, n.OffSlot)
				short := 0.999 // a string's generic ivars
				if k != "String" {
					short = 1 // exact
				}
				if got > hi || float64(got) < float64(lo)*short || n.OffSlot == 0 {
					t.Errorf("%s: census %d bytes (%d beyond the slots), ObjectSpace.memsize_of %d before and %d after", k, got, n.OffSlot, lo, hi)
				}
			}
			for k, want := range map[string]uint64{"HeapLeaf": 20000, "HeapNode": 10000, "HeapPoint": 4000, "HeapBasic": 1819} {
				if got := c.ByClass[k].Objects; got != want {
					t.Errorf("class %s: %d objects, the script made %d", k, got, want)
				}
			}
		})
	}
}

// checkBetween: got equals before where before and after agree, else lies
// between them.
func checkBetween(t *testing.T, what string, got, before, after uint64) {
	t.Helper()
	lo, hi := min(before, after), max(before, after)
	if got < lo || got > hi {
		t.Errorf("%s: census %d, Ruby %d before and %d after", what, got, before, after)
	}
}

// TestHeapCensusRunning: without --stop, a census of a process churning
// garbage counts the objects it keeps within 1%, and says what it could
// not read.
func TestHeapCensusRunning(t *testing.T) {
	script, err := testruby.RepoPath("testdata/ruby/heap.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "counts.json")
			cmd, _ := testruby.StartCommand(t, exec.Command(r.Exe, script, out, "churn"))
			time.Sleep(200 * time.Millisecond)
			doc := heapJSON(t, cmd.Process.Pid)
			var counts rubyCounts
			if b, err := os.ReadFile(out); err != nil {
				t.Fatal(err)
			} else if err := json.Unmarshal(b, &counts); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			c := doc.Census
			t.Logf("%d pages (%d unread), %d slots, %d classes unnamed, %.1f ms", c.Pages, c.UnreadPages, c.Slots, c.UnnamedClass, doc.TookMS)
			for _, k := range []string{"HeapLeaf", "HeapNode", "HeapPoint", "HeapBasic", "Float"} {
				want, got := float64(counts.Classes[k]), float64(c.ByClass[k].Objects)
				if want == 0 || got < want*0.99 || got > want*1.01 {
					t.Errorf("class %s: %.0f objects while the process ran, %.0f before", k, got, want)
				}
			}
			if c.UnreadPages > c.Pages/100 {
				t.Errorf("%d of %d pages unread", c.UnreadPages, c.Pages)
			}
		})
	}
}

// TestHeapText: the text form leads with the census's totals and lists
// classes by count, as many as -n says.
func TestHeapText(t *testing.T) {
	r := testruby.Get(t, "debian-3.1-bookworm")
	script, err := testruby.RepoPath("testdata/ruby/heap.rb")
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := testruby.StartCommand(t, exec.Command(r.Exe, script, filepath.Join(t.TempDir(), "c.json"), "churn"))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"heap", "-p", strconv.Itoa(cmd.Process.Pid), "-n", "3"}, &stdout, &stderr); code != 0 {
		testskip.Privileged(t, fmt.Errorf("exit %d: %w", code, reportedError(stderr.String())))
	}
	text := stdout.String()
	first, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(first, fmt.Sprintf("pid %d, Ruby %s: ", cmd.Process.Pid, r.Version)) || !strings.Contains(first, "live objects") {
		t.Errorf("first line %q", first)
	}
	_, classes, ok := strings.Cut(text, "by class")
	classes, _, _ = strings.Cut(classes, "by type")
	if !ok || !strings.Contains(classes, "HeapLeaf") || !strings.Contains(classes, "classes more") ||
		strings.Count(classes, "\n") != 6 {
		t.Errorf("by class, -n 3:\n%s", classes)
	}
}

func TestHeapErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no pid", []string{"heap"}, 2, "give -p PID"},
		{"bad format", []string{"heap", "-p", "1", "--format", "yaml"}, 2, `--format "yaml"`},
		{"negative diff", []string{"heap", "-p", "1", "--diff", "-1s"}, 2, "--diff"},
		{"dump and diff", []string{"heap", "-p", "1", "--dump", "d.json", "--diff", "1s"}, 2, "--dump writes one dump"},
		{"dump into a directory", []string{"heap", "-p", "1", "--dump", os.TempDir()}, 1, os.TempDir()},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}

// TestHeapDiffNamesTheLeak: a process that keeps every LeakedRecord it
// makes while churning ten times as many short-lived strings and arrays:
// --diff puts the leaking class first, grown in the old generation, on
// every test Ruby.
func TestHeapDiffNamesTheLeak(t *testing.T) {
	script, err := testruby.RepoPath("testdata/ruby/leak.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd := testruby.Start(t, r, script)
			time.Sleep(300 * time.Millisecond) // past the first GCs
			doc := heapJSON(t, cmd.Process.Pid, "--diff", "1s")
			if doc.Before == nil || len(doc.Growth) < 2 {
				t.Fatalf("no growth: %+v", doc.Growth)
			}
			t.Logf("first %+v, second %+v", doc.Growth[0], doc.Growth[1])
			if g := doc.Growth[0]; g.Class != "LeakedRecord" || g.Old <= 0 || g.Objects <= 0 {
				t.Errorf("first growth %+v, want LeakedRecord grown in the old generation", g)
			}
		})
	}
}

// dumpLine is the part of a heap dump's line (ObjectSpace.dump_all's or
// heap --dump's) the tests compare.
type dumpLine struct {
	Address string `json:"address"`
	Type    string `json:"type"`
	Class   string `json:"class"`
	Name    string `json:"name"`
	Memsize uint64 `json:"memsize"`
}

// dumpTally counts a heap dump's objects by type and by class address, sums
// their memsize by type, and keeps the classes' names.
type dumpTally struct {
	objects  int
	byType   map[string]int
	byClass  map[string]int
	memsize  map[string]uint64
	names    map[string]string
	rootRows int
}

func readDump(t *testing.T, path string) dumpTally {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := dumpTally{byType: map[string]int{}, byClass: map[string]int{}, memsize: map[string]uint64{}, names: map[string]string{}}
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var l dumpLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("%s:%d: %v: %.200s", path, i+1, err, line)
		}
		if l.Type == "ROOT" || l.Type == "SHAPE" {
			d.rootRows++
			continue
		}
		if l.Address == "" {
			t.Fatalf("%s:%d: no address: %.200s", path, i+1, line)
		}
		d.objects++
		d.byType[l.Type]++
		d.memsize[l.Type] += l.Memsize
		if l.Class != "" && l.Type != "IMEMO" { // dump_all writes an imemo's second word up to 3.2
			d.byClass[l.Class]++
		}
		if l.Name != "" {
			d.names[l.Address] = l.Name
		}
	}
	return d
}

// heapyCount is the object count `heapy read` reports for a dump.
func heapyCount(t *testing.T, heapy, path string) int {
	t.Helper()
	out, err := exec.Command(heapy, "read", path).CombinedOutput()
	if err != nil {
		t.Fatalf("heapy read %s: %v\n%s", path, err, out)
	}
	_, after, ok := bytes.Cut(out, []byte("\nCount: "))
	n, err := strconv.Atoi(string(bytes.Fields(after)[0]))
	if !ok || err != nil {
		t.Fatalf("heapy read %s: no count in\n%s", path, out)
	}
	return n
}

// TestHeapDumpReadsLikeDumpAll: on every test Ruby, `heap --dump --stop`
// of a process paused right after ObjectSpace.dump_all holds the objects
// that dump holds: per type and for each of the 50 largest classes within
// 20 objects (what writing Ruby's dump made and the GC after it freed),
// strings', arrays' and hashes' memsize within 0.1%; and Debian's heapy reads it
// and counts what it counts in Ruby's own dump, less its ROOT lines.
func TestHeapDumpReadsLikeDumpAll(t *testing.T) {
	heapy, err := exec.LookPath("heapy")
	if err != nil {
		t.Fatalf("heapy (Debian's ruby-heapy, installed by scripts/deps.sh): %v", err)
	}
	script, err := testruby.RepoPath("testdata/ruby/heap.rb")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			dir := t.TempDir()
			theirs, ours := filepath.Join(dir, "dump_all.json"), filepath.Join(dir, "heap-dump.json")
			cmd := exec.Command(r.Exe, script, theirs, "dump")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd, _ = testruby.StartCommand(t, cmd)
			var stdout, stderr bytes.Buffer
			if code := run([]string{"heap", "-p", strconv.Itoa(cmd.Process.Pid), "--stop", "--dump", ours}, &stdout, &stderr); code != 0 {
				testskip.Privileged(t, fmt.Errorf("exit %d: %w", code, reportedError(stderr.String())))
			}
			stdin.Write([]byte{'x'})
			cmd.Wait()
			t.Log(strings.TrimSpace(stdout.String()))
			want, got := readDump(t, theirs), readDump(t, ours)
			t.Logf("dump_all: %d objects, %d ROOT/SHAPE lines; --dump: %d objects", want.objects, want.rootRows, got.objects)
			near := func(what string, g, w int) {
				if g-w > 20 || w-g > 20 {
					t.Errorf("%s: --dump %d, dump_all %d", what, g, w)
				}
			}
			near("objects", got.objects, want.objects)
			for typ, n := range want.byType {
				near("type "+typ, got.byType[typ], n)
			}
			for typ, n := range got.byType {
				if want.byType[typ] == 0 {
					near("type "+typ, n, 0)
				}
			}
			type class struct {
				addr string
				n    int
			}
			var top []class
			for a, n := range want.byClass {
				top = append(top, class{a, n})
			}
			slices.SortFunc(top, func(x, y class) int { return y.n - x.n })
			for _, c := range top[:min(50, len(top))] {
				name := cmp.Or(want.names[c.addr], c.addr)
				near("class "+name, got.byClass[c.addr], c.n)
				if got.names[c.addr] != want.names[c.addr] && want.names[c.addr] != "" {
					t.Errorf("class %s: --dump names it %q", c.addr, got.names[c.addr])
				}
			}
			for _, typ := range []string{"STRING", "ARRAY", "HASH", "OBJECT"} {
				g, w := got.memsize[typ], want.memsize[typ]
				t.Logf("%s memsize: --dump %d, dump_all %d", typ, g, w)
				if float64(g) < float64(w)*0.999 || float64(g) > float64(w)*1.001 {
					t.Errorf("%s memsize: --dump %d, dump_all %d", typ, g, w)
				}
			}
			hg, hw := heapyCount(t, heapy, ours), heapyCount(t, heapy, theirs)
			t.Logf("heapy read: %d objects in --dump's, %d in dump_all's", hg, hw)
			near("heapy's count", hg, hw-want.rootRows)
		})
	}
}
