package recording

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/outfile"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
	"github.com/rubyperf/rubyperf/threadlocal"
)

// Options describe one recording.
type Options struct {
	PIDs    []int    // -p
	Command []string // -- CMD ARGS: started, recorded, and its exit ends the recording
	All     bool     // -a: every Ruby process, including ones that start while recording
	// Select, if set, narrows -a to the processes it says yes to (a
	// target's children, followed from their fork, need no yes).
	Select func(pid int) bool
	// FollowForks records the children targets fork from their first
	// instant (-a always does).
	FollowForks bool
	Frequency   int // -F
	// Wall also samples threads as they leave a CPU, each such sample
	// weighed by the time the thread stayed off: wall-clock time, where
	// threads block (record --wall).
	Wall bool
	// Alloc samples allocations (record --alloc): a thread once the
	// objects it allocated add up to Alloc, at the refills of its Ractor's
	// allocation cache. 0: allocations are not sampled.
	Alloc uint64
	// Live follows each allocation sample's object until it dies (record
	// --alloc --live): what is still alive when the recording ends is
	// written into it (alloclive.go); a live recording (Stacks) answers
	// LiveView while it runs.
	Live     bool
	LiveView *LiveView
	// NoCPU: no CPU samples (record --alloc without -F).
	NoCPU bool
	// StackSize is how many bytes of user stack each sample copies for
	// native unwinding (perf's --call-graph dwarf,SIZE): 0 means
	// bpf.DefaultOptions' 8 KiB, a negative size none (no native user frames).
	StackSize int
	// NativeTables: the program unwinds each target's native stack with
	// its objects' call frame information, compiled into unwind tables
	// (samples carry payload.Payload.Natives), whole at any depth; the
	// stack copy (StackSize) serves where the tables do not reach (JIT
	// code).
	NativeTables bool
	Duration     time.Duration
	Output       string
	DebugFile    string
	// Debuginfo finds debug files for the Ruby binaries attached (give it a
	// short timeout: attaching waits for it); nil: local files only.
	Debuginfo *debuginfo.Finder
	// Status, if set, receives a status line every second (a terminal).
	Status io.Writer
	// Warn, if set, receives one line for each Ruby process -a skips, and why.
	Warn io.Writer
	// Stacks, when set, makes the recording live: no file is written
	// (Output is not used); each sample is merged as it is read, as
	// readback.ReadStacks would read it from a file, and handed to Stacks
	// with the process it is of. Stacks runs with the recording's lock
	// held: keep it short, and copy what it keeps of the stack (its Frames
	// are reused).
	// A live recording forgets the processes that exit, so it can run for
	// days.
	Stacks func(merge.Stack, *Process)
	// Merge says how a live recording merges its samples.
	Merge merge.Options
	// Progress, if set, gets the recording's counts about once a second
	// (without the lock held).
	Progress func(Progress)
	// MemoryBudget bounds, in bytes, what the recording holds that grows
	// with its targets' shape (see budget.go); 0: DefaultMemoryBudget.
	MemoryBudget int64

	// wrapHandle, when set (by a benchmark), wraps what takes each record
	// read from the rings.
	wrapHandle func(func(bpf.Record) error) func(bpf.Record) error
	// sampleTaken, when set (by a test), is given each sample's payload as
	// the recorder decoded and named it, with its bytes before and after.
	sampleTaken func(s *session, before []byte, p *payload.Payload, after []byte)
}

// Progress is how a recording stands.
type Progress struct {
	Samples      uint64 // samples taken so far
	Lost         uint64 // samples the kernel dropped so far (rings full)
	LostSideBand uint64 // process events the kernel dropped so far
	Targets      int    // processes sampled now
	Attached     int    // processes sampled so far
	// Kept counts the processes whose Ruby frames the recording still
	// holds (sampled now, or exited but not forgotten yet: a live
	// recording forgets them), FrameKeys those frames.
	Kept, FrameKeys int
	// FramesOverBudget and NamesRestarted so far (Summary's).
	FramesOverBudget uint64
	NamesRestarted   int
}

// Summary is what a recording did.
type Summary struct {
	Output  string
	Targets int
	PIDs    []int  // the processes recorded
	Samples uint64 // samples written
	Lost    uint64 // samples the kernel dropped (rings full)
	// LostSideBand counts COMM, MMAP2, FORK and EXIT records of any process
	// that the kernel dropped: native frames in code mapped meanwhile may
	// stay unnamed.
	LostSideBand uint64
	// OffCPU counts samples taken as a thread left a CPU (Options.Wall);
	// OffCPUCut those written before their thread was back (more threads
	// off at once than the recorder holds), weighed by the time off so far;
	// OffCPUEndsUnmatched ends of intervals whose sample never came (the
	// kernel dropped it); OffCPUEndsLost ends the kernel could not pass on
	// (their samples weigh the time to the recording's end).
	// OffCPUUnknown those whose end never came though their thread left a
	// CPU again: they weigh nothing.
	OffCPU, OffCPUCut, OffCPUEndsUnmatched, OffCPUEndsLost, OffCPUUnknown uint64
	// Refills counts the allocation-cache refills of targets seen
	// (Options.Alloc), AllocSamples the allocation samples taken at them.
	// AllocUnweighed counts those written with their target's latest
	// window's weight, their own window's not known (it never ended, or
	// too many were held).
	Refills, AllocSamples, AllocUnweighed uint64
	// AllocTrap is what a refill's trap was fitted to cost the program,
	// at the last window weighed (0: not fitted, or nothing).
	AllocTrap time.Duration
	// AllocBusy is what the BPF program ran for the refills of the
	// windows weighed, all together (bpf.AllocWindow.Busy), and
	// AllocBusyRefills how many refills that was.
	AllocBusy        time.Duration
	AllocBusyRefills uint64
	// AllocClassed counts the allocation samples written with their
	// object's class; AllocUnclassed those without (the slot was not
	// seen again in time, held no object then, or its class could not be
	// read: their class reads as unknown). AllocSeensLost counts the
	// reports of what a slot held that the program's ring could not take.
	AllocClassed, AllocUnclassed, AllocSeensLost uint64
	// With Options.Live: the allocation samples whose objects were
	// followed, and of them those alive at the end having survived a GC
	// (LiveAlive) or not yet through one (LiveYoung), those that died, and
	// those whose fate could not be proven (LiveUnknown: not followed for
	// want of a GC stamp, or a slot whose object could be another). Past
	// maxLiveFollowed at once, LiveNotFollowed.
	LiveFollowed, LiveAlive, LiveYoung, LiveDied, LiveUnknown, LiveNotFollowed uint64
	// Urgent counts samples that woke the recorder at once: they had a frame
	// not named yet (the rest are read in batches).
	Urgent    uint64
	Truncated uint64 // stacks deeper than payload.MaxFrames
	// UnknownFrames counts the Ruby frames of samples that could not be
	// read (they read as rubystack.UnknownLabel), as the recording's
	// readers show them; SamplesNotNamed the samples with a frame of this
	// kind or of FramesNotNamed's.
	UnknownFrames, SamplesNotNamed uint64
	// NamesRestarted counts the times a live recording's table of names
	// was full (or its memory budget spent) and started afresh.
	NamesRestarted int
	// FramesOverBudget counts frames of samples named coarser than read,
	// or not read, because the memory budget for names was spent: the
	// method's name without its line, or symtab.OverBudgetLabel (budget.go).
	FramesOverBudget uint64
	// FramesNotNamed counts frames of samples that could not be named for
	// their sample: the name read at their addresses could not be proven to
	// hold then (they read as symtab.ReplacedLabel).
	FramesNotNamed uint64
	// NoGCStamps lists, a line each, the targets whose samples carry no GC
	// stamp, and why: frames of code freed and replaced while recording may
	// keep the name of the code that was there before.
	NoGCStamps []string
	Dropped    []int // targets no longer sampled: most of their frames were implausible
	// Events says, a line each, what targets did that changed what was
	// recorded: an exec (and whether the new image is recorded), a fork.
	Events []string
	// MoreEvents counts the events past maxEvents, not in Events.
	MoreEvents int
	// TargetsGone: the recording ended because no target was left (they
	// exited, were killed, exec'd other programs, or were dropped).
	TargetsGone bool
	Duration    time.Duration
	// CommandState is how the started command ended, once reaped (nil
	// without a command, or when it could not be waited for).
	CommandState *os.ProcessState
	// CommandEnd says how the recording left the started command: "" when
	// it ended by itself (CommandState says how), else what the recording
	// did to end it (CommandStopped, CommandKilled).
	CommandEnd string
}

// How Record leaves a command it started (Summary.CommandEnd).
const (
	// CommandStopped: the recording ended (its duration, or no target
	// left to sample) before the command, and ended the command as
	// timeout(1) would: SIGTERM, then SIGKILL after commandGrace.
	CommandStopped = "stopped with SIGTERM when the recording ended"
	// CommandKilled: the command outlived SIGTERM (or, interrupted, its
	// own Ctrl-C) by commandGrace.
	CommandKilled = "killed with SIGKILL after it outlived the grace period"
)

// session is the state of one recording.
type session struct {
	opts    Options
	w       output // a perfdata.Writer, or live
	live    *live  // Options.Stacks
	sampler *bpf.Sampler
	symtab  *symtab.Table
	// builds and files are what attaching one target leaves for the next:
	// its Ruby's layout and anchors, and what was read of the files it maps
	// looking for request labels (a fleet of one Ruby reads them once).
	builds *rubybuild.Cache
	files  *threadlocal.Files

	mu sync.Mutex // guards the lifecycle, symtab, counters, and the maps below
	lifecycle
	nextGen  uint32    // the Gen of the next attach
	started  time.Time // when sampling started (readback.FeatureStartTime)
	sum      Summary
	buildIDs map[string][]byte // mapped file to build-id, for HEADER_BUILD_ID

	// Reused from one record to the next: the hot path allocates nothing
	// per sample but what it keeps.
	attr    perfdata.Attr         // the layout of every record the rings bring (outputAttr)
	records perfdata.RecordBuffer // the record being handled, decoded
	payload payload.Payload       // its sample's payload
	unseen  payload.Payload       // its frames newFrames did not skip
	raw     []byte                // the record whole
	// frames is the sample's frames as the program wrote them; decoded
	// their storage (payload.DecodeFrames), which holds, at its end, the
	// last sample decoded, decodedFor's: when it was named as decoded
	// (decodedNamed), the next sample of that thread decodes only the
	// frames above those it shares with it. compared is that sample's
	// comparison with the thread's previous one, for newFrames.
	frames       payload.FrameData
	decoded      []payload.Frame
	decodedFor   threadKey
	decodedNamed bool
	decodedKnown int // the frames of this sample taken as decodedFor's last
	compared     struct {
		valid  bool
		shared int
	}
	// lastFrames is each thread's previous sample's frames. A thread's
	// stacks share their bottom from one sample to the next, and the frames
	// of its previous sample are in symtab already (it never forgets): only
	// the frames above the shared part need looking up. lastHeld counts
	// their frames, bounded by the budget's share, maxLastHeld.
	lastFrames            map[threadKey]lastSample
	lastHeld, maxLastHeld int
	// sharedIDs and ids are nameSample's scratch, sharedKinds and kinds
	// their names' kinds; labelIDs nameLabels'.
	sharedIDs, ids     []uint64
	sharedKinds, kinds []nameKind
	labelIDs           [][2]uint64

	// tables gives the program the targets' unwind tables (Options.NativeTables).
	tables *unwindTables

	// off holds off-CPU samples until their threads are back (Options.Wall).
	off offCPU
	// alloc holds allocation samples until their windows are weighed,
	// allocClass until their objects' classes are known.
	alloc      allocHeld
	allocClass allocClasses
	allocLive  allocLive // Options.Live: the objects followed

	// The last checkpoint (see checkpoint), and the symbol table's size
	// when its copy beside the recording was written.
	checkpointed time.Time
	savedSymbols int
	symbolsDue   time.Time // the copy is not written again before
}

// recordBufferSize is how many bytes of records the recording holds
// before it writes them (checkpoint writes them every second): a drain of
// a half-full ring (1 MiB) in one system call, not sixteen. The Go
// runtime's monitor thread, which a system call wakes, polls every 20 µs
// while the call lasts and until the drain is done: with 64 KiB, one of the
// first records of each drain woke it.
const recordBufferSize = 1 << 20

// checkpointInterval is how often a recording is made readable as it
// stands, should the recorder be killed (SIGKILL, the OOM killer, a crash):
// the header then covers every record written, and the Ruby symbol table,
// which goes into the file only when the recording ends, has a copy
// beside it (readback.SymbolsPath).
const checkpointInterval = time.Second

// checkpoint makes the recording readable as it stands, at most once a
// checkpointInterval (s.mu held). The copy of the symbol table goes first:
// every frame of a record the header covers is named in it. The copy is
// a help after a crash, so failing to write it only means trying again.
func (s *session) checkpoint() error {
	if s.live != nil {
		return nil // nothing on disk to make readable
	}
	if now := time.Now(); now.Sub(s.checkpointed) >= checkpointInterval {
		s.checkpointed = now
	} else {
		return nil
	}
	if n := len(s.symtab.Names) + len(s.symtab.VMExec); n != s.savedSymbols && !time.Now().Before(s.symbolsDue) {
		// Written whole each time: a table of many names takes a while to
		// compress, so it is written at most a tenth of the time.
		began := time.Now()
		if f, err := outfile.Create(readback.SymbolsPath(s.opts.Output), 0o600); err == nil {
			if err := s.symtab.Write(f); err != nil {
				f.Abort()
			} else if f.Commit() == nil {
				s.savedSymbols = n
			}
		}
		s.symbolsDue = time.Now().Add(10 * time.Since(began))
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("%s: %w", s.opts.Output, err)
	}
	return nil
}

// maxLastFrames bounds lastFrames; past it, the map starts afresh.
const maxLastFrames = 4096

// Record runs a recording until ctx ends, the duration passes, the targets
// exit, or the started command exits, and always leaves a valid file.
func Record(ctx context.Context, opts Options) (*Summary, error) {
	if err := bpf.Supported(); err != nil {
		return nil, err
	}
	if opts.Stacks == nil {
		if err := outfile.CheckKeepOld(opts.Output); err != nil {
			return nil, err // before anything is started or attached
		}
	}
	if opts.Frequency <= 0 {
		opts.Frequency = bpf.DefaultOptions.Frequency
	}
	if opts.All {
		opts.FollowForks = true
	}
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	s := &session{opts: opts, symtab: symtab.New(), builds: &rubybuild.Cache{}, files: &threadlocal.Files{},
		lifecycle: newLifecycle()}
	if opts.LiveView != nil {
		opts.LiveView.attach(s)
		defer opts.LiveView.attach(nil)
	}
	if opts.NativeTables {
		s.tables = newUnwindTables(s) // (its sampler once open)
	}
	b := splitBudget(opts.MemoryBudget)
	s.symtab.SetBudget(b.names, b.keys)
	s.maxLastHeld = int(b.lastFrames / lastFrameCost)
	s.sum.Output = opts.Output
	start := time.Now()

	// Targets given by pid are attached while the BPF program loads: reading
	// a build's DWARF and loading the program each take a good part of the
	// time to the first sample, and neither needs the other.
	var attached chan attachResult
	if len(opts.Command) == 0 && !opts.All {
		attached = make(chan attachResult, 1)
		go func() { attached <- s.attachAll(opts.PIDs) }()
		defer func() {
			if attached != nil { // not taken: an error came first
				for _, t := range (<-attached).targets {
					t.Close()
				}
			}
		}()
	}

	bo := bpf.DefaultOptions
	bo.Frequency = opts.Frequency
	bo.Wall = opts.Wall
	bo.Alloc, bo.NoCPU = opts.Alloc > 0, opts.NoCPU
	switch {
	case opts.StackSize < 0:
		bo.StackSize = 0
	case opts.StackSize > 0:
		bo.StackSize = uint32(min(opts.StackSize, math.MaxUint32)) // bpf.Open checks it
	}
	sampler, err := bpf.Open(bo)
	if err != nil {
		return nil, err
	}
	s.sampler = sampler
	defer sampler.Close()
	if s.tables != nil {
		// The tables' goroutine uses the sampler: it ends before the
		// sampler is closed (defers run last first). It starts now, for
		// the targets about to be added.
		s.tables.sampler = sampler
		tablesCtx, tablesDone := context.WithCancel(ctx)
		var tablesRun sync.WaitGroup
		tablesRun.Go(func() { s.tables.run(tablesCtx) })
		defer func() { tablesDone(); tablesRun.Wait() }()
	}

	// The recording goes to a new file that replaces the output only once
	// there is something to record: a refused recording leaves an existing
	// file as it was.
	var out *outfile.File
	if opts.Stacks != nil {
		s.live = newLive(s, opts.Stacks)
		s.w = s.live
	} else {
		if out, err = outfile.Create(opts.Output, 0o600); err != nil {
			return nil, err
		}
		out.KeepOld = true // as perf keeps perf.data.old
		defer out.Abort()
		w, err := perfdata.NewWriter(out.File)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opts.Output, err)
		}
		w.BufferSize = recordBufferSize
		// On a full disk, the Ruby names and what says how to read the
		// samples are worth more than the last few records; perf's host
		// description is not, nor the kernel's symbols (about 1 MB: the
		// last thousands of samples; kernel frames then go unnamed).
		for _, f := range []int{readback.FeatureRubySymbols, readback.FeatureAllocLive, readback.FeatureStartTime, readback.FeatureSampleKinds} {
			w.KeepFeature(perfdata.Feature(f))
		}
		s.w = &fileOutput{Writer: w}
	}
	s.attr = outputAttr(bo)
	if err := s.w.AddEvent(s.attr, "ruby-cpu", nil); err != nil {
		return nil, err
	}
	if err := s.synthesizeKernel(); err != nil {
		return nil, fmt.Errorf("%s: %w", opts.Output, err)
	}

	var cmd *exec.Cmd
	cmdDone := make(chan error, 1)
	running := false // past every check that can fail a start
	switch {
	case len(opts.Command) > 0:
		cmd = exec.Command(opts.Command[0], opts.Command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", opts.Command[0], err)
		}
		s.command = cmd.Process.Pid
		stopPreparing := s.tables.prepare(s.command) // while it starts and is attached
		stopWarming := s.warmRefills(s.command, s.openOptions(opts.DebugFile))
		// Wait for the command only after attaching: attaching stops its
		// main thread with ptrace, and as its parent a concurrent wait
		// would take that stop for itself.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t, err := AttachWhenReady(actx, cmd.Process.Pid, s.openOptions(opts.DebugFile), s.files)
		cancel()
		stopPreparing()
		stopWarming()
		go func() {
			// Wait only once it has exited: attaching it again after an
			// exec stops it with ptrace, and a wait of its parent (this
			// process) that is under way would take that stop for an end.
			waitExit(cmd.Process.Pid)
			cmdDone <- cmd.Wait()
		}()
		// Nothing started for a recording that fails to start outlives it.
		defer func() {
			if !running {
				abandonCommand(cmd.Process.Pid, cmdDone)
			}
		}()
		switch {
		case err != nil && (goneFromProc(err) || !alive(cmd.Process.Pid)):
			// Its files went with it: what failed is the command, which
			// said why on its own stderr, or is no Ruby.
			return nil, fmt.Errorf("%s (pid %d) exited before a Ruby in it could be read: a Ruby program's own output "+
				"above says why; else give record a Ruby command (rubyperf record -- ruby app.rb)", opts.Command[0], cmd.Process.Pid)
		case errors.Is(err, rubystack.ErrNotRuby):
			// It runs a program that is no Ruby: the pid is not the
			// user's to check.
			return nil, fmt.Errorf("%s (pid %d): %w: it runs no Ruby; give record a Ruby command "+
				"(rubyperf record -- ruby app.rb, or -- bundle exec ...)", opts.Command[0], cmd.Process.Pid, rubystack.ErrNotRuby)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opts.Command[0], err)
		}
		if err := s.add(t); err != nil {
			return nil, err
		}
	case opts.All:
		pids, err := RubyPIDs()
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if opts.Select != nil && !opts.Select(pid) {
				continue
			}
			t, err := s.attach(pid, "")
			if errors.Is(err, rubystack.ErrLayoutMismatch) {
				// Possibly a frame caught half pushed: discovery tries it
				// again, as it does a Ruby that just started.
				s.mu.Lock()
				s.pending[pid], s.unsure[pid] = attachAttempts, err
				s.mu.Unlock()
				continue
			}
			if err != nil {
				s.skipped(pid, err)
				continue
			}
			if err := s.add(t); err != nil {
				if errors.Is(err, rubystack.ErrNoProcess) {
					continue // it exited while being attached: nothing to record
				}
				return nil, err
			}
		}
	default:
		res := <-attached
		attached = nil
		for i, t := range res.targets {
			if err := s.add(t); err != nil {
				for _, t := range res.targets[i+1:] {
					t.Close()
				}
				return nil, err
			}
		}
		if res.err != nil {
			return nil, res.err
		}
	}
	if len(s.targets) == 0 && !opts.All {
		return nil, errNoTargets
	}
	if out != nil {
		if err := out.Place(); err != nil {
			return nil, err
		}
		// A killed recording's copy of its symbol table goes with it to .old.
		if _, err := os.Lstat(readback.SymbolsPath(opts.Output)); err == nil {
			os.Rename(readback.SymbolsPath(opts.Output), readback.SymbolsPath(opts.Output+".old"))
		}
	}

	running = true

	// Stop on: the caller, the duration, the command's exit, every target's exit.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(runCtx, opts.Duration)
		defer cancel()
	}
	go func() {
		select {
		case err := <-cmdDone:
			cmdDone <- err // for the wait below
			stop()
		case <-s.noTarget:
			s.mu.Lock()
			s.sum.TargetsGone = true
			s.mu.Unlock()
			stop()
		case <-runCtx.Done():
		}
	}()
	go s.discover(runCtx)
	allocDone, liveDone := make(chan struct{}), make(chan struct{})
	if opts.Alloc > 0 {
		go s.watchAllocations(runCtx, allocDone)
	} else {
		close(allocDone)
	}
	// The followed objects are watched past the end, until their last read.
	liveCtx, stopLive := context.WithCancel(context.Background())
	defer stopLive()
	if opts.Alloc > 0 && opts.Live {
		go s.watchLive(liveCtx, liveDone)
	} else {
		close(liveDone)
	}
	if opts.Status != nil {
		go s.status(runCtx, start)
	}
	s.started = time.Now()
	handle := s.handle
	if opts.wrapHandle != nil {
		handle = opts.wrapHandle(handle)
	}
	runErr := sampler.Run(runCtx, handle)
	s.mu.Lock()
	s.endLive()
	s.mu.Unlock()
	sampler.Stop()
	stop()
	<-allocDone // its uprobes off before the targets are closed
	if cmd != nil {
		s.sum.CommandEnd = s.endCommand(ctx, cmd, cmdDone)
		s.sum.CommandState = cmd.ProcessState
	}
	s.sum.Duration = time.Since(start)
	if c, err := sampler.Counts(); err == nil {
		s.sum.Truncated = c.Truncated
		s.sum.Urgent = c.Urgent
		s.sum.OffCPUEndsLost = c.OffCPUEndsLost
		s.sum.Refills, s.sum.AllocSamples, s.sum.AllocSeensLost = c.Refills, c.AllocSamples, c.AllocSeensLost
		s.sum.Lost = max(s.sum.Lost, c.OutputErrors)
	}
	stopLive()
	<-liveDone
	finErr := s.finish()
	if runErr != nil {
		return &s.sum, runErr
	}
	return &s.sum, finErr
}

// handle takes one record from the rings.
func (s *session) handle(rec bpf.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.OffCPUEnd != nil {
		return s.offCPUEnd(rec.OffCPUEnd)
	}
	if rec.AllocSeen != nil {
		return s.allocSeen(rec.AllocSeen)
	}
	// The record whole, as it is written: decoded where it lies, so that
	// what the sample's payload is given (names, its period) is written.
	s.raw = appendRawRecord(s.raw[:0], rec)
	decoded, err := perfdata.DecodeRecordInto(s.raw, &s.attr, &s.records)
	if err != nil {
		return nil // a record we cannot read is not copied
	}
	var p *payload.Payload // the sample's, decoded
	switch r := decoded.(type) {
	case *perfdata.Sample:
		s.sum.Samples++
		var before []byte
		if s.opts.sampleTaken != nil {
			before = bytes.Clone(r.Raw)
		}
		if err := s.decodeSample(r.Raw); err != nil {
			break // copied as it came: a reader shows its native frames
		}
		p = &s.payload
		s.takeSample(p, r)
		if s.opts.sampleTaken != nil {
			s.opts.sampleTaken(s, before, p, r.Raw)
		}
		if p.Thread.OffCPU {
			s.sum.OffCPU++
			return s.offCPUSample(p)
		}
		if p.Flags&payload.Alloc != 0 && p.AllocWindow != 0 {
			return s.allocSample(p)
		}
	case *perfdata.Lost:
		if rec.SideBand {
			s.sum.LostSideBand += r.Lost
		} else {
			// The program counts these samples too (OutputErrors),
			// which replaces this running count at the end.
			s.sum.Lost += r.Lost
		}
	case *perfdata.Comm, *perfdata.Mmap, *perfdata.Mmap2, *perfdata.Fork, *perfdata.Exit:
		if !s.sideBand(decoded) {
			return nil
		}
	default:
		return nil
	}
	return s.writeDecoded(s.raw, decoded, p)
}

// write writes one record (header and data) and checkpoints when due.
func (s *session) write(rec []byte) error { return s.writeDecoded(rec, nil, nil) }

// writeDecoded is write of a record the session has decoded: rec, and its
// sample's payload p (nil: not decoded), for a live output to take as they are.
func (s *session) writeDecoded(raw []byte, rec perfdata.Record, p *payload.Payload) error {
	if err := s.w.WriteRecord(raw, rec, p); err != nil {
		return fmt.Errorf("%s: %w", s.opts.Output, err)
	}
	return s.checkpoint()
}

// appendRawRecord appends rec as the kernel wrote it, header first.
func appendRawRecord(b []byte, rec bpf.Record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(rec.Header.Type))
	b = binary.LittleEndian.AppendUint16(b, uint16(rec.Header.Misc))
	b = binary.LittleEndian.AppendUint16(b, uint16(8+len(rec.Data)))
	return append(b, rec.Data...)
}

// status prints a status line every second.
func (s *session) status(ctx context.Context, start time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last uint64
	for {
		select {
		case <-ctx.Done():
			fmt.Fprint(s.opts.Status, "\r\033[K")
			return
		case <-tick.C:
		}
		s.mu.Lock()
		n, lost, targets := s.sum.Samples, s.sum.Lost, len(s.targets)-len(s.gone)
		s.mu.Unlock()
		fmt.Fprintf(s.opts.Status, "\r\033[Krubyperf: %d samples, %d lost, %d/s, %d targets, %s",
			n, lost, n-last, targets, time.Since(start).Round(time.Second))
		last = n
	}
}

// finish writes the feature sections and closes the file.
func (s *session) finish() error {
	s.mu.Lock()
	unsure := s.unsure
	s.unsure = nil
	s.mu.Unlock()
	for pid, err := range unsure {
		s.skipped(pid, err) // its layout check never passed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if err := s.flushAlloc(); err != nil {
		errs = append(errs, err)
	}
	if err := s.flushAllocClasses(0); err != nil {
		errs = append(errs, err)
	}
	if err := s.flushOffCPU(); err != nil {
		errs = append(errs, err)
	}
	if s.opts.Live {
		s.checkLive(true)
	}
	if s.live == nil {
		if s.opts.Live {
			s.w.SetFeature(perfdata.Feature(readback.FeatureAllocLive), s.liveRecords())
		}
		if b, err := s.symtab.Encode(); err == nil {
			s.w.SetFeature(perfdata.Feature(readback.FeatureRubySymbols), b)
		} else {
			errs = append(errs, err)
		}
		if b, err := gzipFile("/proc/kallsyms"); err == nil {
			s.w.SetFeature(perfdata.Feature(readback.FeatureKallsyms), b)
		}
		s.w.SetFeature(perfdata.Feature(readback.FeatureStartTime), binary.LittleEndian.AppendUint64(nil, uint64(s.started.UnixNano())))
		var kinds uint32
		if !s.opts.NoCPU {
			kinds |= readback.KindsCPU
		}
		if s.opts.Alloc > 0 {
			kinds |= readback.KindsAlloc
		}
		s.w.SetFeature(perfdata.Feature(readback.FeatureSampleKinds), binary.LittleEndian.AppendUint32(nil, kinds))
		s.describeHost()
	}
	for _, t := range s.targets {
		t.Close()
	}
	for _, t := range s.retired {
		t.Close()
	}
	if err := s.w.Close(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", s.opts.Output, err))
	}
	if s.live == nil && s.w.Written(perfdata.Feature(readback.FeatureRubySymbols)) {
		os.Remove(readback.SymbolsPath(s.opts.Output)) // the table is in the file now
	}
	return errors.Join(errs...)
}

func gzipFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := io.Copy(zw, io.LimitReader(f, readback.MaxKallsyms)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// maxEvents bounds Summary.Events: a target may fork all day.
const maxEvents = 100

// event adds a line to Summary.Events (s.mu held).
func (s *session) event(line string) {
	if len(s.sum.Events) < maxEvents {
		s.sum.Events = append(s.sum.Events, line)
	} else {
		s.sum.MoreEvents++
	}
}

// labelsLookEvery bounds how often a target is searched for an extension
// that keeps request labels, however many files it maps.
const labelsLookEvery = time.Second

// lookForLabels searches the targets that mapped files since their last
// look for an extension that keeps request labels, and reconfigures the
// program for those that have one now (s.mu held).
func (s *session) lookForLabels() {
	for _, t := range s.targets {
		if t.labels != nil || !t.labelsLook || time.Since(t.labelsLooked) < labelsLookEvery || s.gone[t.PID] {
			continue
		}
		t.labelsLook, t.labelsLooked = false, time.Now()
		if t.findLabels() {
			if err := s.sampler.Reconfigure(t.PID, t.Config); err != nil {
				t.labels = nil
				t.Config.LabelsMod = 0
			}
		}
	}
}
