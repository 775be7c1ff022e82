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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/outfile"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
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
	// StackSize is how many bytes of user stack each sample copies for
	// native unwinding (perf's --call-graph dwarf,SIZE): 0 means
	// bpf.DefaultOptions' 8 KiB, a negative size none (no native user frames).
	StackSize int
	Duration  time.Duration
	Output    string
	DebugFile string
	// Debuginfo finds debug files for the Ruby binaries attached (give it a
	// short timeout: attaching waits for it); nil: local files only.
	Debuginfo *debuginfo.Finder
	// Status, if set, receives a status line every second (a terminal).
	Status io.Writer
	// Warn, if set, receives one line for each Ruby process -a skips, and why.
	Warn io.Writer
	// Stacks, when set, makes the recording live: no file is written
	// (Output is not used); each sample is merged as it is read, as
	// ReadStacks would read it from a file, and handed to Stacks with the
	// process it is of. Stacks runs with the recording's lock held: keep it
	// short, and copy what it keeps of the stack (its Frames are reused).
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
	// Urgent counts samples that woke the recorder at once: they had a frame
	// not named yet (the rest are read in batches).
	Urgent    uint64
	Truncated uint64 // stacks deeper than bpf.MaxFrames
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
	// method's name without its line, or OverBudgetLabel (budget.go).
	FramesOverBudget uint64
	// FramesNotNamed counts frames of samples that could not be named for
	// their sample: the name read at their addresses could not be proven to
	// hold then (they read as ReplacedLabel).
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

// commandGrace is how long a started command has to exit once told to.
const commandGrace = 5 * time.Second

// attachAttempts is how many times a newly exec'd process is tried (-a)
// before it is given up on.
const attachAttempts = 20

// session is the state of one recording.
type session struct {
	opts    Options
	w       output // a perfdata.Writer, or live
	live    *live  // Options.Stacks
	sampler *bpf.Sampler
	symtab  *SymbolTable
	// builds and files are what attaching one target leaves for the next:
	// its Ruby's layout and anchors, and what was read of the files it maps
	// looking for request labels (a fleet of one Ruby reads them once).
	builds *rubybuild.Cache
	files  *threadlocal.Files

	mu      sync.Mutex // guards targets, symtab, counters, and the maps below
	targets map[int]*Target
	gone    map[int]bool
	pending map[int]int // pids that exec'd, with attempts left to attach
	// execd: targets whose image ended by exec, not yet attached again or
	// given up on; retired: their old Targets, closed at the end.
	execd   map[int]string
	retired []*Target
	// execSeen: targets with a COMM record of an exec the program has not
	// acted on (yet), by when to look again. The record of the exec that
	// started a command comes after the command was attached; a later
	// exec's record comes a moment before the program removes the target.
	execSeen map[int]execSeen
	nextGen  uint32    // the Gen of the next attach
	started  time.Time // when sampling started (FeatureStartTime)
	command  int       // the pid of the command Record started, or 0
	// commandExiting: the kernel reported the command's exit (its EXIT
	// record), which comes before the command can be reaped.
	commandExiting bool
	sum            Summary
	noTarget       chan struct{} // closed when every target has exited (not with -a)
	closeNT        sync.Once
	buildIDs       map[string][]byte // mapped file to build-id, for HEADER_BUILD_ID
	skips          map[int]bool      // -a: processes already said to be skipped

	// Reused from one record to the next: the hot path allocates nothing
	// per sample but what it keeps.
	attr    perfdata.Attr         // the layout of every record the rings bring (outputAttr)
	records perfdata.RecordBuffer // the record being handled, decoded
	payload bpf.Payload           // its sample's payload
	unseen  bpf.Payload           // its frames newFrames did not skip
	raw     []byte                // the record whole
	// lastFrames is each thread's previous sample's frames. A thread's
	// stacks share their bottom from one sample to the next, and the frames
	// of its previous sample are in symtab already (it never forgets): only
	// the frames above the shared part need looking up. lastHeld counts
	// their frames, bounded by the budget's share, maxLastHeld.
	lastFrames            map[threadKey]lastSample
	lastHeld, maxLastHeld int
	// sharedIDs and ids are nameSample's scratch, labelIDs nameLabels'.
	sharedIDs, ids []uint64
	labelIDs       [][2]uint64

	// off holds off-CPU samples until their threads are back (Options.Wall).
	off offCPU

	// The last checkpoint (see checkpoint), and the symbol table's size
	// when its copy beside the recording was written.
	checkpointed time.Time
	savedSymbols int
	symbolsDue   time.Time // the copy is not written again before
}

// checkpointInterval is how often a recording is made readable as it
// stands, should the recorder be killed (SIGKILL, the OOM killer, a crash):
// the header then covers every record written, and the Ruby symbol table,
// which goes into the file only when the recording ends, has a copy
// beside it (SymbolsPath).
const checkpointInterval = time.Second

// SymbolsPath is where a recording in progress keeps a copy of its Ruby
// symbol table: beside it, removed once the table is in the file.
func SymbolsPath(recording string) string { return recording + ".symbols" }

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
		if f, err := outfile.Create(SymbolsPath(s.opts.Output), 0o600); err == nil {
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

// threadKey is a thread of a target process.
type threadKey struct{ pid, tid, gen uint32 }

// maxLastFrames bounds lastFrames; past it, the map starts afresh.
const maxLastFrames = 4096

// attachResult is what attachAll attached, and the error that stopped it.
type attachResult struct {
	targets []*Target
	err     error
}

// attachAll attaches pids in order, stopping at the first that fails.
func (s *session) attachAll(pids []int) attachResult {
	var res attachResult
	for _, pid := range pids {
		t, err := s.attach(pid, s.opts.DebugFile)
		if err != nil {
			res.err = err
			break
		}
		res.targets = append(res.targets, t)
	}
	return res
}

// openOptions are how the session opens a Ruby's files: with debugFile
// (--debug-file, or ""), its debuginfod finder, and its cache of builds.
func (s *session) openOptions(debugFile string) rubybuild.OpenOptions {
	return rubybuild.OpenOptions{DebugFile: debugFile, Debuginfo: s.opts.Debuginfo, Cache: s.builds}
}

// attach attaches pid as the session does: sharing what earlier attaches
// worked out.
func (s *session) attach(pid int, debugFile string) (*Target, error) {
	return Attach(pid, s.openOptions(debugFile), s.files)
}

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
	s := &session{opts: opts, symtab: NewSymbolTable(), builds: &rubybuild.Cache{}, files: &threadlocal.Files{},
		targets: map[int]*Target{}, gone: map[int]bool{},
		pending: map[int]int{}, execd: map[int]string{}, execSeen: map[int]execSeen{}, noTarget: make(chan struct{})}
	b := splitBudget(opts.MemoryBudget)
	s.symtab.setBudget(b)
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
		s.w = fileOutput{w}
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
		// Wait for the command only after attaching: attaching stops its
		// main thread with ptrace, and as its parent a concurrent wait
		// would take that stop for itself.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t, err := AttachWhenReady(actx, cmd.Process.Pid, s.openOptions(opts.DebugFile), s.files)
		cancel()
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
		if _, err := os.Lstat(SymbolsPath(opts.Output)); err == nil {
			os.Rename(SymbolsPath(opts.Output), SymbolsPath(opts.Output+".old"))
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
	if opts.Status != nil {
		go s.status(runCtx, start)
	}
	s.started = time.Now()
	handle := s.handle
	if opts.wrapHandle != nil {
		handle = opts.wrapHandle(handle)
	}
	runErr := sampler.Run(runCtx, handle)
	sampler.Stop()
	if cmd != nil {
		s.sum.CommandEnd = s.endCommand(ctx, cmd, cmdDone)
		s.sum.CommandState = cmd.ProcessState
	}
	s.sum.Duration = time.Since(start)
	if c, err := sampler.Counts(); err == nil {
		s.sum.Truncated = c.Truncated
		s.sum.Urgent = c.Urgent
		s.sum.OffCPUEndsLost = c.OffCPUEndsLost
		s.sum.Lost = max(s.sum.Lost, c.OutputErrors)
	}
	finErr := s.finish()
	if runErr != nil {
		return &s.sum, runErr
	}
	return &s.sum, finErr
}

// The layout is checked before attaching; while recording, the frames the
// BPF walker brings are checked again as they are symbolized. A target
// whose distinct frames are mostly not readable as Ruby frames is read
// through a layout that does not fit (or its memory is being torn apart):
// it is no longer sampled, and the user is told.
const (
	plausibleMinFrames = 64
	plausibleMaxShare  = 0.5
)

// checkPlausible counts a target's newly symbolized frames (s.mu held).
func (s *session) checkPlausible(t *Target, seen, implausible int) {
	t.framesSeen += seen
	t.framesImplausible += implausible
	if t.dropped || t.framesSeen < plausibleMinFrames ||
		float64(t.framesImplausible) <= plausibleMaxShare*float64(t.framesSeen) {
		return
	}
	t.dropped = true
	s.targetExited(t.PID) // as if it had exited: no more samples, and the recording may end
	s.sum.Dropped = append(s.sum.Dropped, t.PID)
	if s.opts.Warn != nil {
		fmt.Fprintf(s.opts.Warn, "rubyperf: pid %d (%s): stopped sampling it: %d of %d distinct frames could not be read "+
			"as Ruby frames through layout %s; its samples so far keep them as [unknown]\n",
			t.PID, ProcessName(t.PID), t.framesImplausible, t.framesSeen, t.Reader.Layout.Source)
	}
}

// skipped says once why -a does not record a Ruby process.
func (s *session) skipped(pid int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.skips == nil {
		s.skips = map[int]bool{}
	}
	if s.opts.Warn == nil || s.skips[pid] || errors.Is(err, rubystack.ErrNoProcess) {
		return // a process that has exited is not worth a line
	}
	s.skips[pid] = true
	msg := err.Error()
	if p := fmt.Sprintf("pid %d: ", pid); strings.HasPrefix(msg, p) {
		msg = msg[len(p):]
	}
	fmt.Fprintf(s.opts.Warn, "rubyperf: pid %d (%s): skipped: %s\n", pid, ProcessName(pid), msg)
}

// add makes t a target: sampled from now on, with its threads and
// mappings described in the file (timestamp 0: before any sample).
func (s *session) add(t *Target) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.targets[t.PID]; ok {
		t.Close()
		return nil
	}
	if err := s.synthesize(t.PID); err != nil {
		t.Close()
		return err
	}
	t.Config.Gen = s.nextGen
	if s.opts.FollowForks {
		t.Config.FollowForks = 1
	}
	t.Config.FollowWall(s.opts.Wall)
	if err := s.sampler.AddProcess(t.PID, t.Config); err != nil {
		t.Close()
		return err
	}
	s.nextGen++
	s.register(t)
	return nil
}

// register makes t, sampled already, the target of its pid (s.mu held).
func (s *session) register(t *Target) {
	s.targets[t.PID] = t
	if s.live != nil {
		t.info = describe(t)
	}
	if a := t.Process.Binary.Anchors(t.Reader.Layout).VMExec; a.Found && a.Size > 0 {
		s.symtab.VMExec[Image{uint32(t.PID), t.Config.Gen}] = VMExec{Path: t.Process.MappedPath, Start: a.Address, End: a.Address + a.Size}
	}
	if _, again := s.execd[t.PID]; !again {
		s.sum.Targets++
		s.sum.PIDs = append(s.sum.PIDs, t.PID)
	}
	s.noGCStamps(t)
}

// noGCStamps says, once per target, that its names are not checked.
func (s *session) noGCStamps(t *Target) {
	if t.NoGCStamps != nil && !t.sharesProcess {
		line := fmt.Sprintf("pid %d (%s): no GC stamps (%v): a frame whose code is freed and replaced while "+
			"recording may keep the name of the code there before; debug info for its Ruby (--debug-file, "+
			"debuginfod) removes the doubt", t.PID, ProcessName(t.PID), t.NoGCStamps)
		if len(s.sum.NoGCStamps) < maxEvents {
			s.sum.NoGCStamps = append(s.sum.NoGCStamps, line)
		}
		if s.opts.Warn != nil && len(s.sum.NoGCStamps) == 1 {
			fmt.Fprintf(s.opts.Warn, "rubyperf: %s\n", line)
		}
	}
}

// handle takes one record from the rings.
func (s *session) handle(rec bpf.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.OffCPUEnd != nil {
		return s.offCPUEnd(rec.OffCPUEnd)
	}
	// The record whole, as it is written: decoded where it lies, so that
	// what the sample's payload is given (names, its period) is written.
	s.raw = appendRawRecord(s.raw[:0], rec)
	decoded, err := perfdata.DecodeRecordInto(s.raw, &s.attr, &s.records)
	if err != nil {
		return nil // a record we cannot read is not copied
	}
	var payload *bpf.Payload // the sample's, decoded
	switch r := decoded.(type) {
	case *perfdata.Sample:
		s.sum.Samples++
		if err := bpf.DecodePayloadInto(&s.payload, r.Raw); err != nil {
			break // copied as it came: a reader shows its native frames
		}
		payload = &s.payload
		s.takeSample(payload, r)
		if payload.Thread.OffCPU {
			s.sum.OffCPU++
			return s.offCPUSample(payload)
		}
	case *perfdata.Lost:
		if rec.SideBand {
			s.sum.LostSideBand += r.Lost
		} else {
			// The program counts these samples too (OutputErrors),
			// which replaces this running count at the end.
			s.sum.Lost += r.Lost
		}
	case *perfdata.Comm:
		if !s.sideBand(int(r.Pid), int(r.Tid), r) {
			return nil
		}
	case *perfdata.Mmap:
		if !s.sideBand(int(r.Pid), int(r.Tid), r) {
			return nil
		}
	case *perfdata.Mmap2:
		if !s.sideBand(int(r.Pid), int(r.Tid), r) {
			return nil
		}
	case *perfdata.Fork:
		s.forked(int(r.Pid), int(r.PPid))
		if !s.sideBand(int(r.Pid), int(r.Tid), r) {
			return nil
		}
	case *perfdata.Exit:
		if !s.sideBand(int(r.Pid), int(r.Tid), r) {
			return nil
		}
	default:
		return nil
	}
	return s.writeDecoded(s.raw, decoded, payload)
}

// takeSample names the Ruby frames of a sample (p, its payload, decoded
// from smp.Raw) in smp.Raw, and gives smp the period p stands for.
func (s *session) takeSample(p *bpf.Payload, smp *perfdata.Sample) {
	// A sample of an image that has exec'd since is not read through
	// the new one: its frames stay unnamed.
	if t, ok := s.targets[int(p.PID)]; ok && t.Config.Gen == p.Gen {
		if t.gcUnchecked {
			s.checkGC(t)
		}
		walkEnvs(t, p)
		unseen := s.newFrames(p)
		ids, added, bad := s.symtab.Resolve(t.Reader, unseen, s.ids[:0])
		if len(added) > 0 && !s.sampler.Sampled(t.PID, t.Config.Gen) {
			// It exec'd before its COMM record was read: what was
			// just read may be the new program's. Unnamed is right.
			s.symtab.Forget(p.PID, p.Gen, added)
			ids = s.symtab.names(unseen, ids)
			added, bad = nil, 0
		}
		s.checkPlausible(t, len(added), bad)
		if len(added) > 0 {
			// Their later samples may wait in the batched rings. A
			// failure only keeps sending them to the urgent ones.
			s.sampler.MarkNamed(p.PID, p.Gen, added)
		}
		s.nameSample(p, smp.Raw, ids)
		s.nameLabels(t, p, smp.Raw)
	} else {
		s.countUnnamed(p)
	}
	if !p.Thread.OffCPU && perfdata.SetSamplePeriod(s.raw, &s.attr, p.Period) == nil {
		smp.Period = p.Period
	}
}

// sideBand takes a COMM, MMAP, MMAP2, FORK or EXIT record of thread tid of
// process pid (s.mu held), and says whether to write it: only a target's.
func (s *session) sideBand(pid, tid int, rec perfdata.Record) bool {
	comm, _ := rec.(*perfdata.Comm)
	exec := comm != nil && comm.Exec()
	_, isExit := rec.(*perfdata.Exit)
	threadExit := isExit && pid == tid
	if exec && s.opts.All {
		if _, ok := s.targets[pid]; !ok {
			s.pending[pid] = attachAttempts
		}
	}
	_, target := s.targets[pid]
	if _, ok := s.execd[pid]; ok && rec.Type() != perfdata.RecordFork {
		target = true // the records of its new image, until given up on
		if exec {     // again (a wrapper script's exec of its Ruby): a new start
			s.execd[pid], s.pending[pid] = comm.Comm, attachAttempts
		}
		if threadExit {
			if exiting(pid) {
				s.giveUp(pid, "exited")
			} else {
				s.giveUp(pid, secureExec)
			}
		}
	}
	if !target {
		return false // not a target: keep the file small
	}
	if rec.Type() == perfdata.RecordMmap2 {
		if t := s.targets[pid]; t != nil && t.labels == nil {
			t.labelsLook = true // an extension that keeps labels may have been loaded
		}
	}
	switch {
	case exec:
		if t := s.targets[pid]; t != nil { // checkExecs decides
			s.execSeen[pid] = execSeen{comm: comm.Comm, gen: t.Config.Gen, deadline: time.Now().Add(execGrace)}
		}
	case threadExit && !exiting(pid):
		// Still running: it exec'd a program the kernel hides from
		// perf (the exec's COMM record came first).
		name := "a program"
		if e, ok := s.execSeen[pid]; ok {
			name = e.comm
		}
		delete(s.execSeen, pid)
		s.execd[pid] = name
		s.sampler.RemoveProcess(pid)
		s.giveUp(pid, secureExec)
	case threadExit:
		if pid == s.command {
			s.commandExiting = true
		}
		s.targetExited(pid)
	}
	return true
}

// write writes one record (header and data) and checkpoints when due.
func (s *session) write(rec []byte) error { return s.writeDecoded(rec, nil, nil) }

// writeDecoded is write of a record the session has decoded: rec, and its
// sample's payload p (nil: not decoded), for a live output to take as they are.
func (s *session) writeDecoded(raw []byte, rec perfdata.Record, p *bpf.Payload) error {
	if err := s.w.WriteRecord(raw, rec, p); err != nil {
		return fmt.Errorf("%s: %w", s.opts.Output, err)
	}
	return s.checkpoint()
}

// checkGC checks the GC counters of a target attached before its first GC,
// once one has run. Counters that do not agree turn its GC stamps off: its
// later samples are named as a Ruby's without stamps are, and the recording
// says its names are not checked (its earlier samples keep the names they
// were given, read while the counters could not be told wrong).
func (s *session) checkGC(t *Target) {
	err := t.Reader.CheckGC()
	if errors.Is(err, rubystack.ErrGCNotRun) {
		return
	}
	t.gcUnchecked = false
	if err == nil {
		return
	}
	t.Config.GcSpan = 0
	if rerr := s.sampler.Reconfigure(t.PID, t.Config); rerr != nil {
		err = fmt.Errorf("%w (and %v)", err, rerr)
	}
	t.Reader.NoGCStamps()
	t.NoGCStamps = err
	s.noGCStamps(t)
}

// lastSample is what newFrames keeps of a thread's previous sample.
type lastSample struct {
	frames []bpf.Frame
	ids    []uint64 // the ids of the names its frames had
	gc     bpf.GCStamp
}

// newFrames is p with only the frames above the part its thread's previous
// sample shared (in s.unseen, overwritten by the next call), and remembers
// p's frames for the next.
func (s *session) newFrames(p *bpf.Payload) *bpf.Payload {
	k := threadKey{p.PID, p.TID, p.Gen}
	if s.lastFrames == nil || len(s.lastFrames) >= maxLastFrames || s.maxLastHeld > 0 && s.lastHeld+len(p.Frames) > s.maxLastHeld {
		s.lastFrames, s.lastHeld = map[threadKey]lastSample{}, 0
	}
	prev := s.lastFrames[k]
	s.lastHeld += max(len(p.Frames)-cap(prev.frames), 0)
	shared := 0
	// Names hold for GC intervals: frames shared with a sample of another
	// interval are looked up again.
	if prev.gc.Stamped == p.GC.Stamped && prev.gc.Epoch == p.GC.Epoch && prev.gc.Interval() == p.GC.Interval() &&
		!p.GC.Compacting && len(prev.ids) == len(prev.frames) {
		for shared < len(prev.frames) && shared < len(p.Frames) &&
			prev.frames[len(prev.frames)-1-shared] == p.Frames[len(p.Frames)-1-shared] {
			shared++
		}
	}
	// The names of the shared frames, before prev's storage is reused.
	s.sharedIDs = append(s.sharedIDs[:0], prev.ids[len(prev.ids)-shared:]...)
	s.lastFrames[k] = lastSample{frames: append(prev.frames[:0], p.Frames...), ids: prev.ids, gc: p.GC}
	s.unseen = bpf.Payload{PID: p.PID, TID: p.TID, Gen: p.Gen, Flags: p.Flags, GC: p.GC, Frames: p.Frames[:len(p.Frames)-shared]}
	return &s.unseen
}

// nameSample writes into the sample's payload (raw, as recorded) the ids of
// the names its frames have for it: those Resolve gave its unseen frames,
// then the shared ones' as the thread's previous sample had them. Each
// sample thus carries the names proven for it.
func (s *session) nameSample(p *bpf.Payload, raw []byte, ids []uint64) {
	ids = append(ids, s.sharedIDs...)
	s.ids = ids
	s.countNames(len(ids), func(i int) (unknown, replaced bool) {
		info, named, ok := s.symtab.FrameName(ids[i])
		return !named || ok && info.Unknown, !ok
	})
	for _, id := range ids {
		if s.symtab.OverBudget(id) {
			s.sum.FramesOverBudget++
		}
	}
	k := threadKey{p.PID, p.TID, p.Gen}
	if last, ok := s.lastFrames[k]; ok {
		last.ids = append(last.ids[:0], ids...)
		s.lastFrames[k] = last
	}
	bpf.NameFrames(raw, p, ids) // a payload it cannot read stays as it was: unnamed
}

// countUnnamed counts in the summary the frames of a sample the recorder
// does not name (its image exec'd since), as a reader will read them: by
// their keys, in the table as it stands (s.mu held).
func (s *session) countUnnamed(p *bpf.Payload) {
	s.countNames(len(p.Frames), func(i int) (unknown, replaced bool) {
		f := p.Frames[i]
		info, named, ok := s.symtab.Lookup(Key(p.PID, p.Gen, f), p.GC)
		return f.Error || !named || ok && info.Unknown, !ok
	})
}

// countNames counts in the summary a sample's n frames without a name, by
// kind (unknown first), and the sample if it has any (s.mu held).
func (s *session) countNames(n int, kind func(i int) (unknown, replaced bool)) {
	unnamed := false
	for i := range n {
		switch unknown, replaced := kind(i); {
		case unknown:
			s.sum.UnknownFrames++
		case replaced:
			s.sum.FramesNotNamed++
		default:
			continue
		}
		unnamed = true
	}
	if unnamed {
		s.sum.SamplesNotNamed++
	}
}

// appendRawRecord appends rec as the kernel wrote it, header first.
func appendRawRecord(b []byte, rec bpf.Record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(rec.Header.Type))
	b = binary.LittleEndian.AppendUint16(b, uint16(rec.Header.Misc))
	b = binary.LittleEndian.AppendUint16(b, uint16(8+len(rec.Data)))
	return append(b, rec.Data...)
}

func (s *session) targetExited(pid int) {
	if s.gone[pid] {
		return
	}
	s.gone[pid] = true
	s.sampler.RemoveProcess(pid)
	s.checkTargets()
}

// checkTargets ends the recording when no target is left to sample and
// none may come back (s.mu held). With -a, more may start.
func (s *session) checkTargets() {
	if s.opts.All || len(s.execd) > 0 {
		return
	}
	for pid := range s.targets {
		if !s.gone[pid] {
			return
		}
	}
	s.closeNT.Do(func() { close(s.noTarget) })
}

// targetExecd: target pid exec'd (s.mu held). The program stopped sampling
// it at that instant; its new image is attached again if it is a Ruby,
// as a new Gen, so nothing of the old image is read through the new one.
func (s *session) targetExecd(pid int, comm string) {
	t := s.targets[pid]
	s.sampler.RemoveProcess(pid)
	delete(s.targets, pid)
	delete(s.execSeen, pid)
	s.retired = append(s.retired, t)
	s.execd[pid] = comm
	s.pending[pid] = attachAttempts
}

// execSeen is a COMM record of an exec of a target still sampled.
type execSeen struct {
	comm     string
	gen      uint32
	deadline time.Time
}

// execGrace is how long the program may take to act on an exec whose
// COMM record came first (the rest of the exec: loading the binary).
const execGrace = 200 * time.Millisecond

// checkExecs decides on the execs seen while their target was still
// sampled (s.mu held): the program removed it since (an exec of the
// image attached), or it still samples it after execGrace (the exec that
// made the image attached).
func (s *session) checkExecs() {
	for pid, e := range s.execSeen {
		t := s.targets[pid]
		switch {
		case t == nil || t.Config.Gen != e.gen:
			delete(s.execSeen, pid)
		case !s.sampler.Sampled(pid, e.gen):
			s.targetExecd(pid, e.comm)
		case time.Now().After(e.deadline):
			delete(s.execSeen, pid)
		}
	}
}

// giveUp: pid exec'd and will not be recorded again (s.mu held): why says
// what it became.
func (s *session) giveUp(pid int, why string) {
	comm, ok := s.execd[pid]
	if !ok {
		return
	}
	delete(s.execd, pid)
	delete(s.pending, pid)
	s.gone[pid] = true
	s.event(fmt.Sprintf("pid %d exec'd %s and %s: no longer recorded", pid, comm, why))
	if pid == s.command {
		return // the command goes on: the recording ends when it exits, as it would have
	}
	s.checkTargets()
}

// forked takes a FORK record (s.mu held): a child of a target that
// follows forks is sampled from its first instant (the program copied its
// parent's configuration); here it gets its Target to be named through.
func (s *session) forked(child, parent int) {
	pt, ok := s.targets[parent]
	if child == parent || !ok || !s.opts.FollowForks || s.gone[parent] {
		return
	}
	if _, known := s.targets[child]; known {
		return
	}
	t, err := pt.forked(child)
	if err != nil {
		s.sampler.RemoveProcess(child) // it exec'd or exited already: nothing of it to name
		return
	}
	s.register(t)
	s.event(fmt.Sprintf("pid %d forked pid %d: recorded", parent, child))
}

// discover attaches to Ruby processes that exec: a target that exec'd
// (again, if it is a Ruby now), and with -a any process; with -a a full
// rescan also runs every few seconds.
func (s *session) discover(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	rescan, progressed := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		s.checkExecs()
		s.lookForLabels()
		if s.live != nil {
			s.live.reap(time.Now())
			s.restartNames()
		}
		var progress *Progress
		if s.opts.Progress != nil && time.Since(progressed) >= time.Second {
			progressed = time.Now()
			progress = &Progress{Samples: s.sum.Samples, Lost: s.sum.Lost, LostSideBand: s.sum.LostSideBand,
				Targets: len(s.targets) - len(s.gone), Attached: s.sum.Targets, Kept: len(s.targets) + len(s.retired),
				FrameKeys: len(s.symtab.Frames), FramesOverBudget: s.sum.FramesOverBudget, NamesRestarted: s.sum.NamesRestarted}
		}
		var try []int
		for pid, left := range s.pending {
			if left <= 0 {
				delete(s.pending, pid)
				s.giveUp(pid, "is not a Ruby")
				continue
			}
			s.pending[pid] = left - 1
			try = append(try, pid)
		}
		s.mu.Unlock()
		if progress != nil {
			s.opts.Progress(*progress)
		}
		if s.opts.All && time.Since(rescan) > 3*time.Second {
			rescan = time.Now()
			if pids, err := RubyPIDs(); err == nil {
				try = append(try, pids...)
			}
		}
		for _, pid := range try {
			s.mu.Lock()
			_, known := s.targets[pid]
			_, again := s.execd[pid]
			s.mu.Unlock()
			if known || !looksLikeRuby(pid) || !again && s.opts.Select != nil && !s.opts.Select(pid) {
				continue
			}
			t, err := s.attach(pid, s.debugFileFor(pid))
			if err != nil {
				s.mu.Lock()
				_, retry := s.pending[pid]
				final := !retry || errors.Is(err, rubybuild.ErrUnsupported) || errors.Is(err, rubystack.ErrLayoutMismatch)
				_, again := s.execd[pid]
				if again && final {
					s.giveUp(pid, "cannot be recorded ("+err.Error()+")")
				}
				s.mu.Unlock()
				// A process that just exec'd may not have mapped its Ruby yet.
				if final && !again {
					s.skipped(pid, err)
				}
				continue
			}
			s.mu.Lock()
			comm, again := s.execd[pid]
			s.mu.Unlock()
			if err := s.add(t); err != nil {
				continue
			}
			s.mu.Lock()
			delete(s.pending, pid)
			if again {
				delete(s.execd, pid)
				s.event(fmt.Sprintf("pid %d exec'd %s: recording the new Ruby", pid, comm))
			}
			s.mu.Unlock()
		}
	}
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

// endCommand waits for the command Record started, after sampling
// stopped. Interrupted (Ctrl-C), the command got the signal too, from its
// terminal (same process group): it has commandGrace to finish. When the
// recording ended otherwise (its duration), the command ends with it, as
// timeout(1) would end it: a user who wants a program to outlive its
// recording records it with -p. A command that is already exiting (the
// kernel's exit record ended the recording, and comes before the command
// can be reaped) is waited for, never signalled.
func (s *session) endCommand(ctx context.Context, cmd *exec.Cmd, done <-chan error) string {
	select {
	case <-done:
		return "" // it exited by itself (and ended the recording)
	default:
	}
	s.mu.Lock()
	exiting := s.commandExiting
	s.mu.Unlock()
	if exiting || exited(cmd.Process.Pid) {
		select {
		case <-done:
			return ""
		case <-time.After(commandGrace):
			// An exit that takes this long is stuck in the kernel
			// (a core dump to a slow pipe): SIGKILL is all that is left.
		}
	}
	how := ""
	if ctx.Err() == nil && cmd.Process.Signal(syscall.SIGTERM) == nil {
		how = CommandStopped // (an error: it was reaped meanwhile, by itself)
	}
	select {
	case <-done:
		return how
	case <-time.After(commandGrace):
		cmd.Process.Kill()
		<-done
		return CommandKilled
	}
}

// exited tells whether child pid has ended and waits to be reaped,
// without reaping it.
func exited(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo == int32(unix.SIGCHLD)
}

// CommandStatus describes how a started command ended, as a shell would:
// "exited with status N", or "killed by SIGNAME" (and "(core dumped)").
func CommandStatus(ps *os.ProcessState) string {
	if ps == nil {
		return "not waited for"
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		s := "killed by " + unix.SignalName(ws.Signal())
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	default:
		return fmt.Sprintf("exited with status %d", ps.ExitCode())
	}
}

// CommandExitCode is the status a shell gives a command that ended as ps
// says: its exit code, or 128 plus the signal that killed it.
func CommandExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// finish writes the feature sections and closes the file.
func (s *session) finish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if err := s.flushOffCPU(); err != nil {
		errs = append(errs, err)
	}
	if s.live == nil {
		if b, err := s.symtab.Encode(); err == nil {
			s.w.SetFeature(perfdata.Feature(FeatureRubySymbols), b)
		} else {
			errs = append(errs, err)
		}
		if b, err := gzipFile("/proc/kallsyms"); err == nil {
			s.w.SetFeature(perfdata.Feature(FeatureKallsyms), b)
		}
		s.w.SetFeature(perfdata.Feature(FeatureStartTime), binary.LittleEndian.AppendUint64(nil, uint64(s.started.UnixNano())))
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
	if len(errs) == 0 && s.live == nil {
		os.Remove(SymbolsPath(s.opts.Output)) // the table is in the file now
	}
	return errors.Join(errs...)
}

// maxKallsyms bounds /proc/kallsyms as read (it is ~10 MiB on a big kernel).
const maxKallsyms = 64 << 20

func gzipFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := io.Copy(zw, io.LimitReader(f, maxKallsyms)); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// debugFileFor is the --debug-file for attaching pid: only a process given
// by the user has the Ruby it names (a process -a finds may not).
func (s *session) debugFileFor(pid int) string {
	for _, p := range s.opts.PIDs {
		if p == pid {
			return s.opts.DebugFile
		}
	}
	if pid == s.command {
		return s.opts.DebugFile
	}
	return ""
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

// waitExit returns once process pid (a child) has exited, without reaping
// it or taking any ptrace stop of it: its pidfd becomes readable then.
// Without pidfds (before Linux 5.3) it looks at the process's state.
func waitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		for alive(pid) {
			time.Sleep(50 * time.Millisecond)
		}
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
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
