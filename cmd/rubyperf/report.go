package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
)

func runReport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	in := addInputFlags(fs)
	threads := fs.Bool("threads", false, "one table per thread")
	top := fs.Int("n", 30, "rows per table")
	if err := in.parse(fs, args); err != nil {
		return err
	}
	// Each table is counted as the stacks are read: no stack is kept.
	whole := newReportTable(*in.weight == "bytes")
	// By process and thread: the samples of threads sampled as they
	// exited all carry tid -1, each process's its own table.
	type threadKey struct{ pid, tid int }
	byThread := map[threadKey]*reportTable{}
	stats, err := readback.ReadStacks(*in.input, in.readOptions(stderr), func(s merge.Stack) error {
		if !in.keep(&s) {
			return nil
		}
		in.weigh(&s)
		if !*threads {
			whole.add(&s)
			return nil
		}
		k := threadKey{s.PID, s.TID}
		t := byThread[k]
		if t == nil {
			t = newReportTable(*in.weight == "bytes")
			t.pid = s.PID
			byThread[k] = t
		}
		t.comm = s.Comm // the thread's latest name: Ruby names threads after they start
		t.add(&s)
		return nil
	})
	if err != nil {
		return err
	}
	if err := in.checkLive(stats); err != nil {
		return err
	}
	width := terminalWidth(stdout)
	fmt.Fprintf(stdout, "# %s: %d samples", *in.input, stats.Samples)
	if stats.Incomplete > 0 {
		hint := "record with --unwind both, or a larger --stack-size"
		if stats.TableUnwound > 0 {
			hint = "where the unwind tables stop: JIT code, code without call frame information, or code mapped just before; record with --unwind both to unwind a stack copy there"
		}
		fmt.Fprintf(stdout, ", %d (%.1f%%) under %s (%s)", stats.Incomplete,
			100*float64(stats.Incomplete)/float64(max(stats.Samples, 1)), merge.IncompleteName, hint)
	}
	if stats.Fallbacks > 0 {
		fmt.Fprintf(stdout, ", %d with Ruby frames on top of native ones (not interleaved)", stats.Fallbacks)
	}
	fmt.Fprintln(stdout)
	if stats.SamplesNotNamed > 0 {
		head, kinds := notNamed(stats.SamplesNotNamed, stats.Samples, stats.Unknown, stats.NotNamed)
		fmt.Fprintf(stdout, "# %s\n#   %s\n", head, kinds)
	}
	if !*threads {
		whole.write(stdout, "all threads", *top, width)
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(byThread), func(a, b threadKey) int {
		return cmp.Or(cmp.Compare(uint32(a.tid), uint32(b.tid)), cmp.Compare(a.pid, b.pid))
	})
	for _, k := range keys {
		t, tid := byThread[k], k.tid
		title := fmt.Sprintf("thread %d \"%s\" (pid %d)", tid, export.Printable(t.comm), t.pid)
		if uint32(tid) == ^uint32(0) {
			title = fmt.Sprintf("threads sampled as they exited, unnamed (pid %d)", t.pid)
		}
		t.write(stdout, title, *top, width)
	}
	return nil
}

// reportKey is one row: a Ruby method (by name and file), a C method, or a
// native function (by name and object file).
type reportKey struct {
	kind merge.Kind
	name string
	file string
}

// reportTable counts the stacks of one table: Ruby and C methods, whose
// self time is time as the innermost Ruby frame (a C method's with the
// native code it runs), and native functions, whose self time is time as
// the leaf. Total time is time anywhere on the stack, counted once per
// sample.
type reportTable struct {
	comm                        string // of the thread's latest sample
	pid                         int
	samples                     int
	all                         uint64
	rubySelf, nativeSelf, total map[reportKey]uint64
	lines                       map[reportKey]map[int64]uint64 // a Ruby method's self time by line
	seen                        map[reportKey]bool
	states                      map[merge.State]uint64 // time in each thread state
	offCPU                      uint64                 // of all, time off the CPU (record --wall)
	// allocs: the samples are allocation samples (record --alloc); all
	// counts objects, or bytes (in bytes).
	allocs, bytes bool
	allocBytes    uint64 // of the allocation samples, whatever the weight
	// classes: of the allocation samples, by their object's class
	// (merge.ClassLabel); classBy, by the Ruby method that allocated them.
	classes map[string]uint64
	classBy map[string]map[string]uint64
}

func newReportTable(bytes bool) *reportTable {
	return &reportTable{bytes: bytes, rubySelf: map[reportKey]uint64{}, nativeSelf: map[reportKey]uint64{},
		total: map[reportKey]uint64{}, lines: map[reportKey]map[int64]uint64{}, seen: map[reportKey]bool{},
		states: map[merge.State]uint64{}, classes: map[string]uint64{}, classBy: map[string]map[string]uint64{}}
}

func (t *reportTable) add(s *merge.Stack) {
	t.samples++
	t.all += s.Period
	if s.Alloc {
		t.allocs = true
		t.allocBytes += s.AllocBytes
	}
	t.states[s.State] += s.Period
	if s.OffCPU {
		t.offCPU += s.Period
	}
	if class := s.LabelValue(merge.ClassLabel); s.Alloc && class != merge.NoLabel {
		t.classes[class] += s.Period
		if t.classBy[class] == nil {
			t.classBy[class] = map[string]uint64{}
		}
		for _, f := range s.Frames {
			if f.Kind == merge.KindRuby {
				t.classBy[class][f.Name] += s.Period
				break
			}
		}
	}
	clear(t.seen)
	rubySeen := false
	for i, f := range s.Frames {
		k := reportKey{f.Kind, f.Name, f.File}
		if f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc {
			if !rubySeen {
				t.rubySelf[k] += s.Period
				rubySeen = true
				if f.Kind == merge.KindRuby && f.Line > 0 {
					if t.lines[k] == nil {
						t.lines[k] = map[int64]uint64{}
					}
					t.lines[k][f.Line] += s.Period
				}
			}
		} else if i == 0 {
			t.nativeSelf[k] += s.Period
		}
		if !t.seen[k] {
			t.seen[k] = true
			t.total[k] += s.Period
		}
	}
}

// hottestLine is the line of a Ruby method with the most self time.
func (t *reportTable) hottestLine(k reportKey) int64 {
	var best int64
	for line, v := range t.lines[k] {
		if b := t.lines[k][best]; v > b || v == b && line < best {
			best = line
		}
	}
	return best
}

// write prints the table's three tables, top rows each: what a Ruby
// developer asks first (which of my methods), then the C methods they call,
// then where native code spends its time. width > 0 fits each row into
// that many columns.
func (t *reportTable) write(w io.Writer, title string, top, width int) {
	all, total := t.all, t.total
	switch {
	case t.allocs && t.bytes:
		fmt.Fprintf(w, "\n# %s: %d allocation samples, %s allocated\n", title, t.samples, export.HumanBytes(all))
	case t.allocs:
		fmt.Fprintf(w, "\n# %s: %d allocation samples, %d objects allocated (%s)\n", title, t.samples, all, export.HumanBytes(t.allocBytes))
	case t.offCPU > 0:
		fmt.Fprintf(w, "\n# %s: %d samples, %.2fs of wall-clock time (%.2fs of it off the CPU)\n", title, t.samples,
			float64(all)/1e9, float64(t.offCPU)/1e9)
	default:
		fmt.Fprintf(w, "\n# %s: %d samples, %.2fs of CPU\n", title, t.samples, float64(all)/1e9)
	}
	if gc := t.states[merge.StateGC]; gc > 0 && all > 0 {
		fmt.Fprintf(w, "# %.1f%% in garbage collection\n", 100*float64(gc)/float64(all))
	}
	pct := func(v uint64) float64 {
		if all == 0 {
			return 0
		}
		return 100 * float64(v) / float64(all)
	}
	table := func(heading, whereHeading string, self map[reportKey]uint64, kind merge.Kind, where func(reportKey) string) {
		var keys []reportKey
		for k := range total {
			if k.kind == kind || kind == merge.KindNative && k.kind == merge.KindKernel {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := keys[i], keys[j]
			if self[a] != self[b] {
				return self[a] > self[b]
			}
			if total[a] != total[b] {
				return total[a] > total[b]
			}
			return a.name < b.name || a.name == b.name && a.file < b.file
		})
		if len(keys) > top {
			keys = keys[:top]
		}
		if len(keys) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n%s\n", heading, strings.Join(t.rows(keys, self, "name", whereHeading, where, width), "\n"))
	}
	rubyHeading, cHeading, nativeHeading := "## Ruby methods (self: running the method's own code)",
		"## C methods (self: in the method, the native code it runs included)", "## native functions (self: the leaf)"
	if t.allocs {
		rubyHeading = "## Ruby methods (self: allocated by the method's own code)"
		cHeading = "## C methods (self: allocated in the method, the native code it runs included)"
		nativeHeading = "## native functions (self: allocated in the function, outside Ruby's allocator)"
	}
	table(rubyHeading, "file:line (its hottest)", t.rubySelf, merge.KindRuby, t.rubyPlace)
	table(cHeading, "", t.rubySelf, merge.KindCFunc,
		func(reportKey) string { return "" })
	table(nativeHeading, "object", t.nativeSelf, merge.KindNative,
		func(k reportKey) string { return filepath.Base(k.file) })
	t.writeClasses(w, top, pct)
	// What the threads were doing, when the recording says (its GC share
	// is also in the title).
	if t.states[merge.StateUnknown] < all {
		fmt.Fprintf(w, "\n## thread states\n")
		for _, st := range append(slices.Clone(merge.States), merge.StateUnknown) {
			if v := t.states[st]; v > 0 {
				fmt.Fprintf(w, "  %6.2f%%  %s\n", pct(v), st.Description())
			}
		}
	}
}

// rows formats keys' rows, under a line of headings: each one's share of
// self (in self) and total time, its name, and where it is (where), fitted
// into width columns (0: no limit). Name and place share what the
// terminal leaves after the two percentages: names first, places cut from
// the left (the end of a path says most). Names and places as the target
// wrote them may hold anything: the rows show them Printable.
func (t *reportTable) rows(keys []reportKey, self map[reportKey]uint64, nameHeading, whereHeading string,
	where func(reportKey) string, width int) []string {
	pct := func(v uint64) float64 { return 100 * float64(v) / float64(max(t.all, 1)) }
	names := make([]string, len(keys))
	nameW := len("function")
	for i, k := range keys {
		names[i] = export.Printable(k.name)
		nameW = max(nameW, utf8.RuneCountInString(names[i]))
	}
	const fixed = 7 + 1 + 7 + 2 + 2 // "self%" "total%" and the gaps
	if width > 0 {
		nameW = min(nameW, max(20, (width-fixed)*3/5))
	}
	lines := []string{strings.TrimRight(fmt.Sprintf("%7s %7s  %-*s  %s", "self%", "total%", nameW, nameHeading, whereHeading), " ")}
	for i, k := range keys {
		place := export.Printable(where(k))
		if width > 0 {
			place = cutLeft(place, max(10, width-fixed-nameW))
		}
		line := fmt.Sprintf("%6.2f%% %6.2f%%  %-*s  %s", pct(self[k]), pct(t.total[k]), nameW, cutRight(names[i], nameW), place)
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return lines
}

// rubyPlace is where a Ruby method is: its file and its hottest line.
func (t *reportTable) rubyPlace(k reportKey) string {
	if k.file == "" {
		return ""
	}
	if line := t.hottestLine(k); line > 0 {
		return fmt.Sprintf("%s:%d", k.file, line)
	}
	return k.file
}

// writeClasses prints the allocated objects' classes, top of them, each
// with its share and the Ruby method that allocated most of it.
func (t *reportTable) writeClasses(w io.Writer, top int, pct func(uint64) float64) {
	if len(t.classes) == 0 {
		return
	}
	classes := slices.SortedFunc(maps.Keys(t.classes), func(a, b string) int {
		if c := cmp.Compare(t.classes[b], t.classes[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(w, "\n## allocated classes (as the object was built; %s)\n%7s  %-30s  %s\n", merge.ClassLabel, "share", "class", "allocated most by")
	for _, c := range classes[:min(top, len(classes))] {
		by, most := "", uint64(0)
		for m, v := range t.classBy[c] {
			if v > most || v == most && m < by {
				by, most = m, v
			}
		}
		if by != "" {
			by = fmt.Sprintf("%s (%.0f%%)", export.Printable(by), 100*float64(most)/float64(t.classes[c]))
		}
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%6.2f%%  %-30s  %s", pct(t.classes[c]), export.Printable(c), by), " "))
	}
}

// cutRight shortens s to n runes, marking the cut with "…".
func cutRight(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// cutLeft shortens s to n runes from the left, marking the cut with "…".
func cutLeft(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return "…" + string(r[len(r)-n+1:])
}

// terminalWidth is how many columns report rows may take: $COLUMNS when
// set, else the terminal's width when stdout is one, else 0 (no limit: a
// pipe or a file gets whole names).
func terminalWidth(w io.Writer) int {
	if c, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && c > 0 {
		return c
	}
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 0
}
