package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

func runReport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	in := addInputFlags(fs)
	threads := fs.Bool("threads", false, "one table per thread")
	top := fs.Int("n", 30, "rows per table")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	// Each table is counted as the stacks are read: no stack is kept.
	whole := newReportTable()
	byThread := map[int]*reportTable{}
	stats, err := recording.ReadStacks(*in.input, in.readOptions(stderr), func(s merge.Stack) error {
		if !*threads {
			whole.add(&s)
			return nil
		}
		t := byThread[s.TID]
		if t == nil {
			t = newReportTable()
			t.comm, t.pid = s.Comm, s.PID
			byThread[s.TID] = t
		}
		t.add(&s)
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# %s: %d samples", *in.input, stats.Samples)
	if stats.Fallbacks > 0 {
		fmt.Fprintf(stdout, ", %d with Ruby frames on top of native ones (not interleaved)", stats.Fallbacks)
	}
	fmt.Fprintln(stdout)
	if !*threads {
		whole.write(stdout, "all threads", *top)
		return nil
	}
	tids := slices.Sorted(maps.Keys(byThread))
	for _, tid := range tids {
		t := byThread[tid]
		t.write(stdout, fmt.Sprintf("thread %d %q (pid %d)", tid, t.comm, t.pid), *top)
	}
	return nil
}

type reportKey struct {
	kind merge.Kind
	name string
	file string
}

// reportTable counts the stacks of one table: Ruby methods, where self
// time is time as the innermost Ruby frame (whatever native code runs
// beneath it), and native functions, where self time is time as the leaf.
// Total time is time anywhere on the stack, counted once per sample.
type reportTable struct {
	comm                        string // of the thread's first sample
	pid                         int
	samples                     int
	all                         uint64
	rubySelf, nativeSelf, total map[reportKey]uint64
	seen                        map[reportKey]bool
}

func newReportTable() *reportTable {
	return &reportTable{rubySelf: map[reportKey]uint64{}, nativeSelf: map[reportKey]uint64{},
		total: map[reportKey]uint64{}, seen: map[reportKey]bool{}}
}

func (t *reportTable) add(s *merge.Stack) {
	t.samples++
	t.all += s.Period
	clear(t.seen)
	rubySeen := false
	for i, f := range s.Frames {
		k := reportKey{f.Kind, f.Name, f.File}
		ruby := f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc
		if ruby {
			k.file = "" // one row per Ruby method, whatever the line
			if !rubySeen {
				t.rubySelf[k] += s.Period
				rubySeen = true
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

// write prints the table's two tables, top rows each.
func (t *reportTable) write(w io.Writer, title string, top int) {
	all, total := t.all, t.total
	fmt.Fprintf(w, "\n# %s: %d samples, %.2fs of CPU\n", title, t.samples, float64(all)/1e9)
	table := func(heading string, self map[reportKey]uint64, want func(merge.Kind) bool) {
		var keys []reportKey
		for k := range total {
			if want(k.kind) {
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
			return a.name < b.name
		})
		if len(keys) > top {
			keys = keys[:top]
		}
		if len(keys) == 0 {
			return
		}
		pct := func(v uint64) float64 {
			if all == 0 {
				return 0
			}
			return 100 * float64(v) / float64(all)
		}
		fmt.Fprintf(w, "\n%s\n%7s %7s  %-6s  %s\n", heading, "self%", "total%", "kind", "function")
		for _, k := range keys {
			where := ""
			if k.file != "" {
				where = "  (" + k.file + ")"
			}
			fmt.Fprintf(w, "%6.2f%% %6.2f%%  %-6s  %s%s\n", pct(self[k]), pct(total[k]), k.kind, k.name, where)
		}
	}
	table("## Ruby methods (self: the innermost Ruby frame)", t.rubySelf, func(k merge.Kind) bool {
		return k == merge.KindRuby || k == merge.KindCFunc
	})
	table("## native functions (self: the leaf)", t.nativeSelf, func(k merge.Kind) bool {
		return k == merge.KindNative || k == merge.KindKernel
	})
}
