package main

import (
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/rubyperf/rubyperf/merge"
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
	stacks, stats, err := in.stacks(stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# %s: %d samples", *in.input, stats.Samples)
	if stats.Fallbacks > 0 {
		fmt.Fprintf(stdout, ", %d with Ruby frames on top of native ones (not interleaved)", stats.Fallbacks)
	}
	fmt.Fprintln(stdout)
	if !*threads {
		writeReportTable(stdout, "all threads", stacks, *top)
		return nil
	}
	byThread := map[int][]merge.Stack{}
	var tids []int
	for _, s := range stacks {
		if _, ok := byThread[s.TID]; !ok {
			tids = append(tids, s.TID)
		}
		byThread[s.TID] = append(byThread[s.TID], s)
	}
	sort.Ints(tids)
	for _, tid := range tids {
		ss := byThread[tid]
		writeReportTable(stdout, fmt.Sprintf("thread %d %q (pid %d)", tid, ss[0].Comm, ss[0].PID), ss, *top)
	}
	return nil
}

type reportKey struct {
	kind merge.Kind
	name string
	file string
}

// writeReportTable prints two tables: Ruby methods, where self time is
// time as the innermost Ruby frame (whatever native code runs beneath it),
// and native functions, where self time is time as the leaf. Total time is
// time anywhere on the stack, counted once per sample.
func writeReportTable(w io.Writer, title string, stacks []merge.Stack, top int) {
	rubySelf, nativeSelf, total := map[reportKey]uint64{}, map[reportKey]uint64{}, map[reportKey]uint64{}
	var all uint64
	for _, s := range stacks {
		all += s.Period
		seen := map[reportKey]bool{}
		rubySeen := false
		for i, f := range s.Frames {
			k := reportKey{f.Kind, f.Name, f.File}
			ruby := f.Kind == merge.KindRuby || f.Kind == merge.KindCFunc
			if ruby {
				k.file = "" // one row per Ruby method, whatever the line
				if !rubySeen {
					rubySelf[k] += s.Period
					rubySeen = true
				}
			} else if i == 0 {
				nativeSelf[k] += s.Period
			}
			if !seen[k] {
				seen[k] = true
				total[k] += s.Period
			}
		}
	}
	fmt.Fprintf(w, "\n# %s: %d samples, %.2fs of CPU\n", title, len(stacks), float64(all)/1e9)
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
	table("## Ruby methods (self: the innermost Ruby frame)", rubySelf, func(k merge.Kind) bool {
		return k == merge.KindRuby || k == merge.KindCFunc
	})
	table("## native functions (self: the leaf)", nativeSelf, func(k merge.Kind) bool {
		return k == merge.KindNative || k == merge.KindKernel
	})
}
