package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// runTop is rubyperf top: the hottest Ruby and C methods of running
// Rubies, live. On a terminal the screen is redrawn every interval and
// keys sort and switch views; elsewhere (a pipe, a file) a plain block of
// text is written every interval.
func runTop(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	pids := pidsFlag(fs, "p", "pid[,pid..] of running Rubies")
	all := fs.Bool("a", false, "every Ruby process, including ones that start while watching")
	freq := fs.Int("F", 99, "samples per second")
	var every, dur seconds
	every = seconds(time.Second)
	fs.Var(&every, "interval", "how often the view is redrawn: seconds, or a duration like 500ms (default 1s)")
	fs.Var(&dur, "d", "how long to watch: seconds, or a duration like 1m30s (default: until q, Ctrl-C or the targets exit)")
	rows := fs.Int("n", 0, "rows of methods (default: as many as the terminal holds, 20 elsewhere)")
	nativeStack := addNativeStackFlags(fs)
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	opts := recording.Options{PIDs: *pids, All: *all, Frequency: *freq, Duration: time.Duration(dur), Warn: export.LineWriter{W: stderr},
		MemoryBudget: recording.DefaultMemoryBudget}
	if err := checkFrequency(*freq); err != nil {
		return err
	}
	switch {
	case (len(opts.PIDs) > 0) == *all:
		return usageError{"give one of -p PID or -a (to start a program and watch it: rubyperf record -- CMD)"}
	case every < seconds(100*time.Millisecond):
		return usageError{fmt.Sprintf("--interval %s: at least 100ms", time.Duration(every))}
	case dur < 0:
		return usageError{"-d must be positive"}
	case *rows < 0:
		return usageError{"-n must be positive"}
	}
	var err error
	if opts.NativeTables, opts.StackSize, err = nativeStack.options(stderr); err != nil {
		return err
	}
	limitMemory(byteSize(recording.DefaultMemoryBudget))

	v := &topView{rows: *rows, freq: *freq, pids: opts.PIDs, started: time.Now(), last: newReportTable(false), since: newReportTable(false),
		shown: newReportTable(false), redraw: make(chan struct{}, 1)}
	opts.Stacks = v.add
	opts.Progress = v.progress

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	out, tty := stdout, false
	leave := func() {}
	if f, ok := stdout.(*os.File); ok && isTerminal(f) {
		in := os.Stdin
		restore, err := rawInput(in)
		if err == nil {
			tty = true
			go v.keys(in, quit)
			// Warnings (a process skipped under -a, say) would land on
			// the alternate screen and vanish at the next redraw: the
			// screen shows the last, and they are printed on leaving it.
			opts.Warn = export.LineWriter{W: &v.warnings}
			fmt.Fprint(out, "\x1b[?1049h\x1b[?25l") // the alternate screen, no cursor
			// Once: leaving the alternate screen twice puts the cursor
			// back over what was written after the first.
			leave = sync.OnceFunc(func() {
				fmt.Fprint(out, "\x1b[?25h\x1b[?1049l")
				restore()
				v.warnings.writeTo(stderr)
			})
			defer leave()
		}
	}
	type result struct {
		sum *recording.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := recording.Record(ctx, opts)
		done <- result{sum, err}
	}()
	tick := time.NewTicker(time.Duration(every))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			v.draw(out, tty, true)
		case <-v.redraw:
			v.draw(out, tty, false)
		case res := <-done:
			leave()
			if res.err != nil && !errors.Is(res.err, context.Canceled) {
				return res.err
			}
			if res.sum != nil {
				fmt.Fprintf(stderr, "rubyperf top: %d samples, %d lost, %d targets, %s\n", res.sum.Samples, res.sum.Lost,
					res.sum.Targets, res.sum.Duration.Round(time.Second))
			}
			return nil
		}
	}
}

// topView is what top shows: the samples of the last interval and those
// since it started, counted as report counts them.
type topView struct {
	mu          sync.Mutex
	rows, freq  int
	pids        []int // -p's, or none (-a)
	started     time.Time
	last, since *reportTable // this interval's samples, and all
	shown       *reportTable // the last interval's, as drawn
	byTotal     bool         // sorted by total, not self
	cumulative  bool         // since the start, not the last interval
	samples     uint64       // in the last interval drawn
	lost        uint64       // so far
	targets     int
	redraw      chan struct{} // a key asks for the view again
	warnings    heldLines     // on a terminal, the recording's warnings
}

// heldLines keeps the lines written to it, the first maxHeldLines of them
// and the last, for a screen that cannot print them as they come; safe
// for concurrent use.
type heldLines struct {
	mu    sync.Mutex
	lines []string
	more  int    // lines past maxHeldLines, not kept
	last  string // the last line written
}

const maxHeldLines = 50

func (h *heldLines) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		h.last = l
		if len(h.lines) < maxHeldLines {
			h.lines = append(h.lines, l)
		} else {
			h.more++
		}
	}
	return len(p), nil
}

// lastLine is the last line written, or "".
func (h *heldLines) lastLine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// writeTo writes the lines kept to w, and how many were not.
func (h *heldLines) writeTo(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		fmt.Fprintln(w, l)
	}
	if h.more > 0 {
		fmt.Fprintf(w, "rubyperf top: %d more warnings not shown\n", h.more)
	}
}

// who says what is watched: -p's pids, or how many Rubies -a samples.
func (v *topView) who() string {
	if len(v.pids) == 0 {
		return fmt.Sprintf("every Ruby (%d now)", v.targets)
	}
	ids := make([]string, len(v.pids))
	for i, p := range v.pids {
		ids[i] = strconv.Itoa(p)
	}
	return "pid " + cutRight(strings.Join(ids, ","), 40)
}

func (v *topView) add(s merge.Stack, _ *recording.Process) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.last.add(&s)
	v.since.add(&s)
}

func (v *topView) progress(p recording.Progress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lost, v.targets = p.Lost, p.Targets
}

// keys reads single keys from in until q (or in ends): s and t sort by
// self and total, c switches between the last interval and since the
// start; each redraws at once.
func (v *topView) keys(in *os.File, quit func()) {
	b := make([]byte, 16)
	for {
		n, err := in.Read(b)
		if err != nil || n == 0 {
			return
		}
		v.mu.Lock()
		for _, k := range b[:n] {
			switch k {
			case 'q', 'Q', 3: // 3: Ctrl-C, which raw input does not make a signal
				v.mu.Unlock()
				quit()
				return
			case 's':
				v.byTotal = false
			case 't':
				v.byTotal = true
			case 'c':
				v.cumulative = !v.cumulative
			}
		}
		v.mu.Unlock()
		select {
		case v.redraw <- struct{}{}:
		default:
		}
	}
}

// draw writes the view: on a terminal, over the screen, fitted to it;
// elsewhere, as a block of plain lines. advance: an interval has ended
// (else a key asked to see the same one otherwise).
func (v *topView) draw(w io.Writer, tty, advance bool) {
	v.mu.Lock()
	now := time.Now()
	if advance {
		v.shown, v.last = v.last, newReportTable(false)
		v.samples = uint64(v.shown.samples)
	}
	t := v.shown
	if v.cumulative {
		t = v.since
	}
	width, height := 0, 0
	if f, ok := w.(*os.File); ok && tty {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
			width, height = int(ws.Col), int(ws.Row)
		}
	}
	rows := v.rows
	if rows == 0 {
		rows = 20
		if height > 0 {
			rows = max(1, height-7)
		}
	}
	var b strings.Builder
	if tty {
		b.WriteString("\x1b[H\x1b[2J")
	} else {
		fmt.Fprintf(&b, "\n")
	}
	what, sortBy := "the last interval", "self"
	if v.cumulative {
		what = fmt.Sprintf("since the start (%s)", now.Sub(v.started).Round(time.Second))
	}
	if v.byTotal {
		sortBy = "total"
	}
	lines := []string{
		fmt.Sprintf("rubyperf top  %s  %s  %d Hz  %d samples in the last interval, %d lost so far",
			now.Format("15:04:05"), v.who(), v.freq, v.samples, v.lost),
		t.statesLine(),
		fmt.Sprintf("methods by %s, %s%s", sortBy, what, map[bool]string{true: "   keys: s self  t total  c since start/last  q quit", false: ""}[tty]),
		v.warnings.lastLine(), // on a terminal, the last warning; else empty
	}
	lines = append(lines, t.methodRows(rows, v.byTotal, width)...)
	v.mu.Unlock()
	for _, l := range lines {
		if width > 0 {
			l = cutRight(l, width)
		}
		b.WriteString(l)
		b.WriteString("\n")
	}
	if tty {
		// The last line without its newline: a full screen does not scroll.
		s := strings.TrimSuffix(b.String(), "\n")
		io.WriteString(w, s)
		return
	}
	io.WriteString(w, b.String())
}

// statesLine says what the threads were doing, in one line: the share of
// each state seen, garbage collection's among them.
func (t *reportTable) statesLine() string {
	if t.all == 0 {
		return "no samples: the targets ran no Ruby on a CPU"
	}
	var parts []string
	for _, st := range append(slices.Clone(merge.States), merge.StateUnknown) {
		if v := t.states[st]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", st.Description(), 100*float64(v)/float64(t.all)))
		}
	}
	return "threads: " + strings.Join(parts, ", ")
}

// methodRows are the Ruby and C methods with the most self (or total)
// time, n of them, a row each, under a heading, fitted to width (0: no
// limit).
func (t *reportTable) methodRows(n int, byTotal bool, width int) []string {
	var keys []reportKey
	for k := range t.total {
		if k.kind == merge.KindRuby || k.kind == merge.KindCFunc {
			keys = append(keys, k)
		}
	}
	first, second := t.rubySelf, t.total
	if byTotal {
		first, second = second, first
	}
	slices.SortFunc(keys, func(a, b reportKey) int {
		switch {
		case first[a] != first[b]:
			return cmpDesc(first[a], first[b])
		case second[a] != second[b]:
			return cmpDesc(second[a], second[b])
		case a.name != b.name:
			return strings.Compare(a.name, b.name)
		}
		return strings.Compare(a.file, b.file)
	})
	keys = keys[:min(n, len(keys))]
	return t.rows(keys, t.rubySelf, "method", "file:line (its hottest)", t.rubyPlace, width)
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

// rawInput puts the terminal in so that each key is read as typed, not
// echoed, and returns what puts it back.
func rawInput(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("%s: not a terminal: %w", f.Name(), err)
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
