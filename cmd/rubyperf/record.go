package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

func runRecord(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	pids := pidsFlag(fs, "p", "pid[,pid..] of running Rubies")
	all := fs.Bool("a", false, "every Ruby process, including ones that start while recording")
	follow := fs.Bool("follow-forks", false, "also record the processes the targets fork, from their first instant (-a always does)")
	freq := fs.Int("F", 99, "samples per second")
	wall := fs.Bool("wall", false, "wall-clock time: also sample threads as they block (sleep, I/O, locks, the GVL), each weighed by the time it stays off the CPU")
	var alloc allocFlag
	fs.Var(&alloc, "alloc", "sample object allocations at the refills of Ruby's allocation caches (a heap page's free slots each); "+
		"--alloc=N: a sample per N objects the refills a thread is seen to run hand out, not every refill; CPU samples too only with -F")
	live := fs.Bool("live", false, "with --alloc, follow each sampled object until it dies: what is still alive at the end "+
		"(having survived a GC) is kept in the recording, for convert -f pprof's inuse_space and the views' --live")
	var dur seconds
	fs.Var(&dur, "d", "how long to record: seconds, or a duration like 1m30s (default: until Ctrl-C or the targets exit)")
	out := fs.String("o", "rubyperf.data", "output file")
	debugFile := fs.String("debug-file", "", "separate debug file with DWARF for the Ruby binary")
	nativeStack := addNativeStackFlags(fs)
	budget := byteSize(recording.DefaultMemoryBudget)
	fs.Var(&budget, "memory-budget", "bytes the recorder may hold of what grows with the targets' code (names, frames): past it, new frames are named coarser and counted; like 256M or 1G")
	cmdArgs, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	opts := recording.Options{All: *all, FollowForks: *follow, Wall: *wall, Frequency: *freq, Duration: time.Duration(dur), Output: *out, DebugFile: *debugFile,
		Debuginfo: recordFinder(stderr), Command: cmdArgs, Warn: export.LineWriter{W: stderr}, MemoryBudget: int64(budget),
		Alloc: uint64(alloc), Live: *live}
	if *live && alloc == 0 {
		return usageError{"--live follows allocated objects: give --alloc too"}
	}
	if alloc > 0 {
		opts.NoCPU = !flagSet(fs, "F")
	}
	opts.PIDs = *pids
	modes := 0
	for _, on := range []bool{len(opts.PIDs) > 0, *all, len(cmdArgs) > 0} {
		if on {
			modes++
		}
	}
	switch {
	case modes != 1:
		return usageError{"give exactly one of -p PID, -a, or -- CMD ARGS"}
	case checkFrequency(*freq) != nil:
		return checkFrequency(*freq)
	case dur < 0:
		return usageError{"-d must be positive"}
	case budget < recording.MinMemoryBudget:
		return usageError{fmt.Sprintf("--memory-budget %s: at least %s", budget, byteSize(recording.MinMemoryBudget))}
	}
	if opts.NativeTables, opts.StackSize, err = nativeStack.options(stderr); err != nil {
		return err
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		opts.Status = stderr
	}
	limitMemory(budget)
	// Ctrl-C and SIGTERM end the recording; the file is finalized.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := recording.Record(ctx, opts)
	if sum != nil {
		fmt.Fprintf(stderr, "rubyperf: %d samples, %d lost, %d truncated stacks, %d unknown frames, %d targets, %s; wrote %s\n",
			sum.Samples, sum.Lost, sum.Truncated, sum.UnknownFrames, sum.Targets, sum.Duration.Round(time.Millisecond), sum.Output)
		if len(opts.Command) > 0 && len(sum.PIDs) > 0 {
			how := recording.CommandStatus(sum.CommandState)
			if sum.CommandEnd != "" {
				how = sum.CommandEnd + ", " + how
			}
			fmt.Fprintf(stderr, "rubyperf: %s (pid %d): %s\n", export.Printable(opts.Command[0]), sum.PIDs[0], how)
		}
		for i, e := range sum.Events {
			if more := len(sum.Events) - i + sum.MoreEvents; i == maxEventLines && more > 1 {
				fmt.Fprintf(stderr, "rubyperf: and %d more forks and execs\n", more)
				break
			}
			fmt.Fprintf(stderr, "rubyperf: %s\n", export.Printable(e)) // names a target chose
		}
		if opts.Alloc > 0 {
			every := "one at each"
			if opts.Alloc > 1 {
				every = fmt.Sprintf("one per %d objects of the", opts.Alloc)
			}
			fmt.Fprintf(stderr, "rubyperf: %d allocation samples, %s %d allocation-cache refills seen, each weighed by what its window of watched refills stands for\n",
				sum.AllocSamples, every, sum.Refills)
			if sum.AllocTrap > 0 || sum.AllocBusyRefills > 0 {
				walk := time.Duration(0)
				if sum.AllocBusyRefills > 0 {
					walk = sum.AllocBusy / time.Duration(sum.AllocBusyRefills)
				}
				fmt.Fprintf(stderr, "rubyperf: a refill stalled the target about %s: its trap %s (fitted to Ruby's count of allocations), its sample %s (measured)\n",
					(sum.AllocTrap + walk).Round(100*time.Nanosecond), sum.AllocTrap.Round(100*time.Nanosecond), walk.Round(100*time.Nanosecond))
			}
			if sum.AllocUnweighed > 0 {
				fmt.Fprintf(stderr, "rubyperf: %d of them weighed by an earlier window's weight: their own window never ended\n", sum.AllocUnweighed)
			}
			if n := sum.AllocClassed + sum.AllocUnclassed; n > 0 {
				fmt.Fprintf(stderr, "rubyperf: %d of %d allocation samples (%.1f%%) name their object's class (pprof label %s)\n",
					sum.AllocClassed, n, 100*float64(sum.AllocClassed)/float64(n), merge.ClassLabel)
				if sum.AllocSeensLost > 0 {
					fmt.Fprintf(stderr, "rubyperf: %d reports of what a slot held were lost (the program's ring was full)\n", sum.AllocSeensLost)
				}
			}
			if opts.Live {
				fmt.Fprintf(stderr, "rubyperf: of %d sampled objects followed, %d alive at the end having survived a GC (--live), %d alive not yet through one, %d died, %d not proven either way",
					sum.LiveFollowed, sum.LiveAlive, sum.LiveYoung, sum.LiveDied, sum.LiveUnknown)
				if sum.LiveNotFollowed > 0 {
					fmt.Fprintf(stderr, ", %d not followed (too many at once)", sum.LiveNotFollowed)
				}
				fmt.Fprintln(stderr)
			}
		}
		if opts.Wall {
			fmt.Fprintf(stderr, "rubyperf: %d samples taken as threads left a CPU, weighed by the time they stayed off\n", sum.OffCPU)
			if sum.OffCPUUnknown > 0 {
				fmt.Fprintf(stderr, "rubyperf: %d of them weigh nothing: the kernel did not tell when their thread was back\n", sum.OffCPUUnknown)
			}
			if lost := sum.OffCPUCut + sum.OffCPUEndsLost; lost > 0 {
				fmt.Fprintf(stderr, "rubyperf: warning: %d of them weigh only the time off until the recorder had to write them (too many threads off at once, or the kernel's ring of their ends was full)\n", lost)
			}
		}
		if sum.FramesOverBudget > 0 {
			fmt.Fprintf(stderr, "rubyperf: warning: %s\n", overBudget(sum.FramesOverBudget, budget))
		}
		if sum.SamplesNotNamed > 0 {
			head, kinds := notNamed(sum.SamplesNotNamed, sum.Samples, sum.UnknownFrames, sum.FramesNotNamed)
			fmt.Fprintf(stderr, "rubyperf: %s %s (%s: not readable as sampled; %s: the name read could not be proven "+
				"to hold when sampled, the code may have been freed and replaced)\n", head, kinds, rubystack.UnknownLabel, symtab.ReplacedLabel)
		}
		if n := len(sum.NoGCStamps); n > 1 {
			fmt.Fprintf(stderr, "rubyperf: %d targets had no GC stamps (the first is above)\n", n)
		}
		if sum.TargetsGone && len(opts.Command) == 0 {
			fmt.Fprintf(stderr, "rubyperf: the recording ended when its last target was gone\n")
		}
		if sum.LostSideBand > 0 {
			fmt.Fprintf(stderr, "rubyperf: warning: the kernel dropped %d process events (mmap, comm, exit) while the machine was busy; native frames in code loaded meanwhile may show as [unknown]\n", sum.LostSideBand)
		}
	}
	if err == nil && sum != nil && sum.CommandState != nil && sum.CommandEnd == "" {
		// As time(1) does: the command's own status, when it ended by
		// itself (or by a Ctrl-C it shared) and the recording succeeded.
		if code := recording.CommandExitCode(sum.CommandState); code != 0 {
			return exitStatus(code)
		}
	}
	return err
}

// exitStatus is a status to exit with, already explained on stderr.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// notNamed says how many samples have a Ruby frame without a name (head)
// and how many frames of each kind (kinds): the same words for a
// recording's summary and its report.
func notNamed[N int | uint64](samples, of, unknown, replaced N) (head, kinds string) {
	var k []string
	if unknown > 0 {
		k = append(k, fmt.Sprintf("%d %s", unknown, rubystack.UnknownLabel))
	}
	if replaced > 0 {
		k = append(k, fmt.Sprintf("%d %s", replaced, symtab.ReplacedLabel))
	}
	return fmt.Sprintf("%d of %d samples (%.2f%%) have Ruby frames without a name:", samples, of,
		100*float64(samples)/float64(max(of, 1))), strings.Join(k, ", ")
}

// limitMemory has Go's collector keep its memory near a recorder's memory
// budget plus goHeadroom (debug.SetMemoryLimit), unless $GOMEMLIMIT says
// otherwise: garbage is collected sooner rather than let grow to twice
// what is live.
func limitMemory(budget byteSize) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(budget) + goHeadroom)
	}
}

// memoryFixed is what a recorder holds besides its budget, whatever the
// targets: the rings' buffers, its code and runtime, the files it reads.
const memoryFixed = 64 << 20

// goHeadroom is the part of memoryFixed Go's collector counts (the
// runtime, the files read, garbage not yet collected); the rings' buffers
// and the code are mapped outside Go's heap, and a limit that counted them
// again let the heap grow into their share: the agent's peak RSS on the
// hostile shape reached 197 MiB of its 192 MiB bound under CI's load.
const goHeadroom = 32 << 20

// overBudget says how many frames were named coarser than read because
// the memory budget for names was spent: the words of record's summary
// and the agent's log.
func overBudget(frames uint64, budget byteSize) string {
	return fmt.Sprintf("%d frames of samples named coarser than read (their method without a line, or %s): the memory budget "+
		"(--memory-budget %s) for the targets' names was spent; nothing past it is kept", frames, symtab.OverBudgetLabel, budget)
}

// maxEventLines bounds the lines a summary gives to forks and execs.
const maxEventLines = 10

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// seconds is a duration flag that also takes a plain number of seconds, as
// "-d 5" reads to a perf user.
type seconds time.Duration

func (d *seconds) String() string { return time.Duration(*d).String() }

func (d *seconds) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		*d = seconds(f * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is neither seconds nor a duration like 1m30s", s)
	}
	*d = seconds(v)
	return nil
}

// allocFlag is --alloc: off (0), on alone (bpf.DefaultAllocEvery), or
// --alloc=N objects a sample.
type allocFlag uint64

func (a *allocFlag) String() string { return strconv.FormatUint(uint64(*a), 10) }

func (a *allocFlag) IsBoolFlag() bool { return true }

func (a *allocFlag) Set(s string) error {
	switch s {
	case "true":
		*a = bpf.DefaultAllocEvery
		return nil
	case "false":
		*a = 0
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > 1<<40 {
		return fmt.Errorf("%q: a number of objects from 1", s)
	}
	*a = allocFlag(n)
	return nil
}

// byteSize is a size flag in bytes, with an optional K, M or G (powers of
// 1024): "256M".
type byteSize int64

func (b byteSize) String() string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if b != 0 && b%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(b)>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

func (b *byteSize) Set(s string) error {
	num, shift := strings.TrimSuffix(strings.ToUpper(s), "B"), uint(0)
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		}
		if shift > 0 {
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64>>shift {
		return fmt.Errorf("%q is not a size like 256M", s)
	}
	*b = byteSize(v << shift)
	return nil
}
