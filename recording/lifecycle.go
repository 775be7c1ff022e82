package recording

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// lifecycle is what a recording knows of its targets' lives, from the
// records of the side-band ring (COMM, FORK, EXIT) and from /proc: which
// pids are sampled, which have gone, which exec'd and are attached again
// or given up on, which -a skipped, and when the last target has gone.
// The session's methods in this file change it, with the session's lock held.
type lifecycle struct {
	targets map[int]*Target
	gone    map[int]bool
	pending map[int]int // pids that exec'd, with attempts left to attach
	// unsure: Rubies -a found at its start whose layout check failed, being
	// tried again (pending), with the last failure: said to be skipped if
	// never attached.
	unsure map[int]error
	// execd: targets whose image ended by exec, not yet attached again or
	// given up on; retired: their old Targets, closed at the end.
	execd   map[int]string
	retired []*Target
	// execSeen: targets with a COMM record of an exec the program has not
	// acted on (yet), by when to look again. The record of the exec that
	// started a command comes after the command was attached; a later
	// exec's record comes a moment before the program removes the target.
	execSeen map[int]execSeen
	skips    map[int]bool // -a: processes already said to be skipped
	// allocWarned: a failure to arm a target's refill uprobes was said
	// (record --alloc), once; allocChecked: the kernel took them once.
	allocWarned, allocChecked bool
	command                   int // the pid of the command Record started, or 0
	// commandExiting: the kernel reported the command's exit (its EXIT
	// record), which comes before the command can be reaped.
	commandExiting bool
	noTarget       chan struct{} // closed when every target has exited (not with -a)
	closeNT        sync.Once
	// discoverDue wakes discover for a round: there may be work for it
	// (discoverSoon).
	discoverDue chan struct{}
}

// newLifecycle is a lifecycle with no target yet.
func newLifecycle() lifecycle {
	return lifecycle{targets: map[int]*Target{}, gone: map[int]bool{}, pending: map[int]int{}, execd: map[int]string{},
		unsure: map[int]error{}, execSeen: map[int]execSeen{}, noTarget: make(chan struct{}), discoverDue: make(chan struct{}, 1)}
}

// attachAttempts is how many times a newly exec'd process is tried (-a)
// before it is given up on.
const attachAttempts = 20

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
	defer s.tables.prepare(pid)() // while it is attached
	t, err := Attach(pid, s.openOptions(debugFile), s.files)
	if err == nil && s.opts.Alloc > 0 {
		// Its refills are found now, not under the session's lock (add):
		// the sweep of a build's code takes a few hundred milliseconds.
		t.Process.Binary.RefillSites(t.Reader.Layout)
	}
	return t, err
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
	s.tables.awaitTables(t.PID) // (not under s.mu)
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
	t.Config.SampleAllocations(s.opts.Alloc)
	if err := s.sampler.AddProcess(t.PID, t.Config); err != nil {
		t.Close()
		return err
	}
	if err := s.attachRefills(t); err != nil {
		s.sampler.RemoveProcess(t.PID)
		t.Close()
		return err
	}
	s.nextGen++
	s.register(t)
	return nil
}

// attachRefills makes t's allocation sampler (record --alloc): uprobes
// on its allocation-cache refills, armed in windows (watchAllocations).
func (s *session) attachRefills(t *Target) error {
	if s.opts.Alloc == 0 {
		return nil
	}
	r, err := s.refillsOf(t)
	if err != nil {
		return err
	}
	t.refills = r
	a := t.Reader.Layout.Allocated
	counter, _ := t.Reader.AllocationCounter()
	poolCounter := a.PoolCounter
	if a.Pools < 0 {
		poolCounter = -1
	}
	t.Config.CountAllocations(counter, a.PagePool, poolCounter)
	return s.sampler.Reconfigure(t.PID, t.Config)
}

// register makes t, sampled already, the target of its pid (s.mu held).
func (s *session) register(t *Target) {
	s.targets[t.PID] = t
	if s.live != nil {
		t.info = describe(t)
	}
	if a := t.Process.Binary.Anchors(t.Reader.Layout).VMExec; a.Found && a.Size > 0 {
		s.symtab.VMExec[symtab.Image{PID: uint32(t.PID), Gen: t.Config.Gen}] = symtab.VMExec{Path: t.Process.MappedPath, Start: a.Address, End: a.Address + a.Size}
	}
	if _, again := s.execd[t.PID]; !again {
		s.sum.Targets++
		s.sum.PIDs = append(s.sum.PIDs, t.PID)
	}
	s.noGCStamps(t)
}

// sideBand takes a COMM, MMAP, MMAP2, FORK or EXIT record (s.mu held), and
// says whether to write it: only a target's.
func (s *session) sideBand(rec perfdata.Record) bool {
	var pid, tid int
	var comm *perfdata.Comm
	threadExit := false
	switch r := rec.(type) {
	case *perfdata.Comm:
		pid, tid, comm = int(r.Pid), int(r.Tid), r
	case *perfdata.Mmap:
		pid, tid = int(r.Pid), int(r.Tid)
	case *perfdata.Mmap2:
		pid, tid = int(r.Pid), int(r.Tid)
	case *perfdata.Fork:
		pid, tid = int(r.Pid), int(r.Tid)
		s.forked(pid, int(r.PPid))
	case *perfdata.Exit:
		pid, tid = int(r.Pid), int(r.Tid)
		threadExit = pid == tid
	default:
		return false
	}
	exec := comm != nil && comm.Exec()
	if exec && s.opts.All {
		if _, ok := s.targets[pid]; !ok {
			s.pending[pid] = attachAttempts
			s.discoverSoon()
		}
	}
	_, target := s.targets[pid]
	if _, ok := s.execd[pid]; ok && rec.Type() != perfdata.RecordFork {
		target = true // the records of its new image, until given up on
		if exec {     // again (a wrapper script's exec of its Ruby): a new start
			s.execd[pid], s.pending[pid] = comm.Comm, attachAttempts
			s.discoverSoon()
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
	if m, ok := rec.(*perfdata.Mmap2); ok {
		if t := s.targets[pid]; t != nil && t.labels == nil {
			t.labelsLook = true // an extension that keeps labels may have been loaded
			s.discoverSoon()
		}
		if m.Prot&4 != 0 { // PROT_EXEC
			s.tables.request(pid)
		}
	}
	switch {
	case exec:
		if t := s.targets[pid]; t != nil { // checkExecs decides
			s.execSeen[pid] = execSeen{comm: comm.Comm, gen: t.Config.Gen, deadline: time.Now().Add(execGrace)}
			s.discoverSoon()
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
	s.discoverSoon()
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
	if err == nil {
		err = s.attachRefills(t) // uprobes are of one process
	}
	if err != nil {
		s.sampler.RemoveProcess(child) // it exec'd or exited already: nothing of it to name
		return
	}
	s.register(t)
	// The program copied the parent's mappings with rows, if it had them
	// yet: make the child's own.
	s.tables.request(child)
	s.event(fmt.Sprintf("pid %d forked pid %d: recorded", parent, child))
}

// discoverEvery is how often discover runs while it has work.
const discoverEvery = 100 * time.Millisecond

// discoverSoon wakes discover for a round: there may be work for it.
func (s *session) discoverSoon() {
	select {
	case s.discoverDue <- struct{}{}:
	default: // a round is due already
	}
}

// discoverIdle is how often discover runs for -a and for a live recording
// (the agent) with no work at hand: the full rescan (every
// rescanEvery), forgetting the processes that ended, and the names'
// restart. New Rubies come to it sooner, by their exec records
// (discoverSoon); every 100 ms, it woke the agent, and the Go runtime's
// monitor thread after it, ten times a second for nothing.
const discoverIdle = time.Second

// rescanEvery is how often -a looks through /proc for Rubies it was not
// told of by an exec record (one that loaded libruby itself, say).
const rescanEvery = 3 * time.Second

// discoverWait is how long discover may wait for its next round (s.mu
// held; progressed: when Options.Progress was last called): every
// discoverEvery while it has work, until a target's look for labels, a
// progress report or an idle round is due, or with nothing to do (0) until
// discoverSoon. A recording of one program that does not exec wakes for
// none of it.
func (s *session) discoverWait(progressed time.Time) time.Duration {
	if len(s.execSeen) > 0 || len(s.pending) > 0 || s.live != nil && s.symtab.Full() {
		return discoverEvery
	}
	var wait time.Duration
	due := func(d time.Duration) {
		d = max(d, discoverEvery)
		if wait == 0 || d < wait {
			wait = d
		}
	}
	for _, t := range s.targets {
		if t.labels == nil && t.labelsLook && !s.gone[t.PID] {
			due(labelsLookEvery - time.Since(t.labelsLooked))
		}
	}
	if s.opts.Progress != nil {
		due(time.Second - time.Since(progressed))
	}
	if s.opts.All || s.live != nil {
		due(discoverIdle)
	}
	return wait
}

// discover attaches to Ruby processes that exec: a target that exec'd
// (again, if it is a Ruby now), and with -a any process; with -a a full
// rescan also runs every few seconds.
func (s *session) discover(ctx context.Context) {
	timer := time.NewTimer(discoverEvery)
	defer timer.Stop()
	rescan, progressed := time.Now(), time.Now()
	var scan rubyScan
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.discoverDue:
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
		var skip []int
		for pid, left := range s.pending {
			if left <= 0 {
				delete(s.pending, pid)
				s.giveUp(pid, "is not a Ruby")
				if _, ok := s.unsure[pid]; ok {
					skip = append(skip, pid)
				}
				continue
			}
			s.pending[pid] = left - 1
			try = append(try, pid)
		}
		for _, pid := range skip {
			err := s.unsure[pid]
			delete(s.unsure, pid)
			s.mu.Unlock()
			s.skipped(pid, err)
			s.mu.Lock()
		}
		s.mu.Unlock()
		if progress != nil {
			s.opts.Progress(*progress)
		}
		if s.opts.All && time.Since(rescan) >= rescanEvery {
			rescan = time.Now()
			known := func(pid int) bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				_, ok := s.targets[pid]
				return ok
			}
			if pids, err := scan.pids(rescan, known); err == nil {
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
				left, retry := s.pending[pid]
				// A layout checked against a Ruby still booting under load can
				// catch a frame half pushed: a mismatch is tried again for the
				// first half of the attempts (a wrong layout fails every time).
				mismatch := errors.Is(err, rubystack.ErrLayoutMismatch)
				final := !retry || errors.Is(err, rubybuild.ErrUnsupported) || mismatch && left < attachAttempts/2
				_, again := s.execd[pid]
				if again && final {
					s.giveUp(pid, "cannot be recorded ("+err.Error()+")")
				}
				if _, ok := s.unsure[pid]; ok {
					s.unsure[pid] = err
					if final {
						delete(s.unsure, pid)
					}
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
			delete(s.unsure, pid)
			if again {
				delete(s.execd, pid)
				s.event(fmt.Sprintf("pid %d exec'd %s: recording the new Ruby", pid, comm))
			}
			s.mu.Unlock()
		}
		s.mu.Lock()
		wait := s.discoverWait(progressed)
		s.mu.Unlock()
		if wait > 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
	}
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
