package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/outfile"
	"github.com/rubyperf/rubyperf/rubystack"
)

// maxDiffWait bounds --diff's wait between the two censuses.
const maxDiffWait = 24 * time.Hour

func runHeap(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("heap", flag.ContinueOnError)
	target := addRubyTargetFlags(fs, "text", "json")
	pid, format := target.pid, target.format
	stop := fs.Bool("stop", false, "stop the process while its heap is counted, for counts exactly as ObjectSpace's")
	stopLimit := fs.Duration("stop-limit", 10*time.Second, "with --stop, resume the process and fail if counting takes longer")
	top := fs.Int("n", 0, "classes to list (0: as many as fit the terminal, or 30 into a pipe)")
	diff := fs.Duration("diff", 0, "take a second census this long after the first and show what grew, by class")
	dump := fs.String("dump", "", "write every live object to `FILE` as JSON lines in ObjectSpace.dump_all's shape (for heapy and other heap-dump tools) instead of counting")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *pid == 0 {
		return usageError{"give -p PID"}
	}
	if err := target.checkFormat(); err != nil {
		return err
	}
	if *diff < 0 || *diff > maxDiffWait || *top < 0 || *stopLimit <= 0 {
		return usageError{fmt.Sprintf("--diff between 0 and %v, -n ≥ 0 and --stop-limit > 0", maxDiffWait)}
	}
	if *dump != "" {
		if *diff > 0 {
			return usageError{"--dump writes one dump: take two and compare them (heapy diff) instead of --diff"}
		}
		if err := outfile.Check(*dump); err != nil {
			return err
		}
	}
	r, closeReader, err := target.openReader(stderr)
	if err != nil {
		return err
	}
	defer closeReader()
	if *dump != "" {
		d, took, err := dumpHeap(r, *pid, *dump, *stop, *stopLimit)
		if err != nil {
			return err
		}
		doc := dumpDoc{PID: *pid, Version: r.Layout.Version.String(), Stopped: *stop, TookMS: ms(took), File: *dump, Dump: d}
		if *format == "json" {
			return writeJSON(stdout, doc)
		}
		how := "while it ran"
		if *stop {
			how = "stopped"
		}
		fmt.Fprintf(stdout, "pid %d, Ruby %s: %s live objects written to %s (read %s in %.0f ms)\n", *pid, doc.Version,
			thousands(d.Objects), *dump, how, doc.TookMS)
		if d.UnreadPages > 0 || d.CutReferences > 0 {
			fmt.Fprintf(stdout, "not read: %d pages (freed or reused under the read), the elements of %s arrays\n", d.UnreadPages, thousands(d.CutReferences))
		}
		return nil
	}
	census := func() (*rubystack.HeapCensus, time.Duration, error) {
		return takeCensus(r, *pid, *stop, *stopLimit)
	}
	first, took, err := census()
	if err != nil {
		return err
	}
	doc := heapDoc{PID: *pid, Version: r.Layout.Version.String(), Stopped: *stop, Census: first, TookMS: ms(took)}
	if *diff > 0 {
		time.Sleep(*diff)
		second, took2, err := census()
		if err != nil {
			return err
		}
		doc.Before, doc.Census, doc.TookMS = first, second, ms(took2)
		doc.AfterSeconds = diff.Seconds()
		doc.Growth = growth(first, second)
	}
	if *format == "json" {
		return writeJSON(stdout, doc)
	}
	n := *top
	if n == 0 {
		n = fitRows(stdout, 30)
	}
	writeHeapText(stdout, doc, n)
	return nil
}

// takeCensus counts r's heap, the process stopped for the count when stop
// (and resumed, the census failed, past limit).
func takeCensus(r *rubystack.Reader, pid int, stop bool, limit time.Duration) (*rubystack.HeapCensus, time.Duration, error) {
	var c *rubystack.HeapCensus
	took, err := readHeap(pid, stop, limit, "counting", func(ctx context.Context) (err error) {
		c, err = r.HeapCensus(ctx)
		return err
	})
	return c, took, err
}

// readHeap runs read (what doing says it does) on pid's heap, the process
// stopped while it runs when stop (and resumed, the read failed, past
// limit).
func readHeap(pid int, stop bool, limit time.Duration, doing string, read func(context.Context) error) (time.Duration, error) {
	ctx := context.Background()
	thaw := func() {}
	if stop {
		var err error
		if thaw, err = rubystack.Freeze(pid); err != nil {
			return 0, err
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	began := time.Now()
	err := read(ctx)
	thaw()
	took := time.Since(began)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return took, fmt.Errorf("pid %d: %s its heap took longer than --stop-limit %v; it was resumed: raise the limit, or drop --stop to read it while it runs", pid, doing, limit)
	case errors.Is(err, rubystack.ErrNoHeapLayout):
		return took, fmt.Errorf("pid %d: %w: this Ruby's layout lacks it; give its debug file (--debug-file)", pid, err)
	case err != nil:
		return took, fmt.Errorf("pid %d: heap: %w", pid, err)
	}
	return took, nil
}

// dumpHeap writes every live object of pid's heap to path (heap --dump).
func dumpHeap(r *rubystack.Reader, pid int, path string, stop bool, limit time.Duration) (*rubystack.HeapDump, time.Duration, error) {
	f, err := outfile.Create(path, 0o644)
	if err != nil {
		return nil, 0, err
	}
	var d *rubystack.HeapDump
	took, err := readHeap(pid, stop, limit, "dumping", func(ctx context.Context) (err error) {
		d, err = r.DumpHeap(ctx, f)
		return err
	})
	if err != nil {
		f.Abort()
		return nil, took, err
	}
	if err := f.Commit(); err != nil {
		return nil, took, err
	}
	return d, took, nil
}

// dumpDoc is what `rubyperf heap --dump` prints.
type dumpDoc struct {
	PID     int                 `json:"pid"`
	Version string              `json:"version"`
	Stopped bool                `json:"stopped"`
	TookMS  float64             `json:"took_ms"`
	File    string              `json:"file"`
	Dump    *rubystack.HeapDump `json:"dump"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// heapDoc is what `rubyperf heap` prints: one census, or with --diff the
// second one (Census), the first (Before) and what grew between them.
type heapDoc struct {
	PID          int                   `json:"pid"`
	Version      string                `json:"version"`
	Stopped      bool                  `json:"stopped"`
	TookMS       float64               `json:"took_ms"`
	Census       *rubystack.HeapCensus `json:"census"`
	Before       *rubystack.HeapCensus `json:"before,omitempty"`
	AfterSeconds float64               `json:"after_seconds,omitempty"`
	Growth       []classGrowth         `json:"growth,omitempty"`
}

// classGrowth is how one class's count changed between two censuses.
type classGrowth struct {
	Class   string `json:"class"`
	Objects int64  `json:"objects"` // after minus before
	Bytes   int64  `json:"bytes"`   // slot bytes and bytes beyond the slots
	Old     int64  `json:"old"`     // old-generation objects, after minus before
	Now     uint64 `json:"now"`     // objects after
}

// growth is every class whose count changed, the most grown in the old
// generation first (garbage not yet collected is young: a class whose
// objects pile up survives GCs), then the most grown in all.
func growth(before, after *rubystack.HeapCensus) []classGrowth {
	var out []classGrowth
	diff := func(name string, a, b rubystack.Count) {
		if a != b {
			out = append(out, classGrowth{name, int64(a.Objects) - int64(b.Objects),
				int64(a.Bytes+a.OffSlot) - int64(b.Bytes+b.OffSlot), int64(a.Old) - int64(b.Old), a.Objects})
		}
	}
	for name, a := range after.ByClass {
		diff(name, a, before.ByClass[name])
	}
	for name, b := range before.ByClass {
		if _, ok := after.ByClass[name]; !ok {
			diff(name, rubystack.Count{}, b)
		}
	}
	slices.SortFunc(out, func(x, y classGrowth) int {
		if c := cmp.Compare(y.Old, x.Old); c != 0 {
			return c
		}
		if c := cmp.Compare(y.Objects, x.Objects); c != 0 {
			return c
		}
		return strings.Compare(x.Class, y.Class)
	})
	return out
}

// namedCount is one row of a census table.
type namedCount struct {
	name string
	rubystack.Count
}

// byObjects is counts' rows, the most objects first.
func byObjects(counts map[string]rubystack.Count) []namedCount {
	rows := make([]namedCount, 0, len(counts))
	for n, c := range counts {
		rows = append(rows, namedCount{n, c})
	}
	slices.SortFunc(rows, func(x, y namedCount) int {
		if x.Objects != y.Objects {
			if x.Objects > y.Objects {
				return -1
			}
			return 1
		}
		return strings.Compare(x.name, y.name)
	})
	return rows
}

func writeHeapText(w io.Writer, d heapDoc, top int) {
	c := d.Census
	live := c.Slots - c.FreeSlots
	how := "while it ran"
	if d.Stopped {
		how = "stopped"
	}
	var beyond uint64
	for _, n := range c.ByType {
		beyond += n.OffSlot
	}
	fmt.Fprintf(w, "pid %d, Ruby %s: %s live objects in %s slots of %d heap pages (%s), %s free; counted %s in %.0f ms\n",
		d.PID, d.Version, thousands(live), thousands(c.Slots), c.Pages, sizeText(c.HeapBytes), thousands(c.FreeSlots), how, d.TookMS)
	fmt.Fprintf(w, "beyond the slots: %s in strings', arrays', hashes' and objects' own memory (a class's tables and C data not counted)\n",
		sizeText(beyond))
	if c.GCRead {
		fmt.Fprintf(w, "GC: %d runs", c.GC.Count)
		if c.MajorGCsKnown {
			fmt.Fprintf(w, ", %d major", c.MajorGCs)
		}
		fmt.Fprintln(w)
	}
	if c.UnreadPages > 0 || c.UnnamedClass > 0 {
		fmt.Fprintf(w, "not read: %d pages (freed or reused under the read), %s objects' classes\n", c.UnreadPages, thousands(c.UnnamedClass))
	}
	if d.Before != nil {
		fmt.Fprintf(w, "\nwhat grew in %v, by class, the most in the old generation first (old objects, objects, bytes, objects now):\n",
			time.Duration(d.AfterSeconds*float64(time.Second)))
		shown := 0
		for _, g := range d.Growth {
			if shown == top || g.Old <= 0 && g.Objects <= 0 {
				break
			}
			fmt.Fprintf(w, "  %+10d %+10d %11s %11s  %s\n", g.Old, g.Objects, signedSize(g.Bytes), thousands(g.Now), export.Printable(g.Class))
			shown++
		}
		if shown == 0 {
			fmt.Fprintln(w, "  nothing")
		}
	}
	fmt.Fprintf(w, "\nby class (objects, share of live objects, slot bytes, bytes beyond the slots):\n")
	rows := byObjects(c.ByClass)
	for i, row := range rows {
		if i == top {
			fmt.Fprintf(w, "  … %d classes more (-n, or --format json)\n", len(rows)-top)
			break
		}
		fmt.Fprintf(w, "  %12s %6.2f%% %10s %10s  %s\n", thousands(row.Objects), pct(row.Objects, live), sizeText(row.Bytes),
			offSlotText(row.Count), export.Printable(row.name))
	}
	fmt.Fprintf(w, "\nby type:\n")
	for _, row := range byObjects(c.ByType) {
		fmt.Fprintf(w, "  %12s %6.2f%% %10s %10s  %s\n", thousands(row.Objects), pct(row.Objects, live), sizeText(row.Bytes),
			offSlotText(row.Count), row.name)
	}
}

// offSlotText is the bytes beyond c's slots, or "" when none was counted.
func offSlotText(c rubystack.Count) string {
	if c.OffSlot == 0 {
		return ""
	}
	return "+" + sizeText(c.OffSlot)
}

func pct(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// thousands is n with commas: 1,234,567.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sizeText is n bytes in the largest binary unit that keeps it ≥ 1.
func sizeText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func signedSize(n int64) string {
	if n < 0 {
		return "-" + sizeText(uint64(-n))
	}
	return "+" + sizeText(uint64(n))
}

// fitRows is how many rows of a table fit the terminal w is, leaving room
// for the census's header and its table by type; def into a pipe or file.
func fitRows(w io.Writer, def int) int {
	if l, err := strconv.Atoi(os.Getenv("LINES")); err == nil && l > 0 {
		return max(10, l-30)
	}
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 {
			return max(10, int(ws.Row)-30)
		}
	}
	return def
}
