package recording

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/procstat"
	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
	"github.com/rubyperf/rubyperf/threadlocal"
)

// Target is one Ruby process being recorded.
type Target struct {
	PID     int
	Process *rubystack.Process
	Reader  *rubystack.Reader
	Config  bpf.ProcessConfig
	mem     *rubystack.ProcessMemory

	// framesSeen and framesImplausible count the distinct frames the BPF
	// walk brought and how many of them could not be read as Ruby frames.
	framesSeen, framesImplausible int
	dropped                       bool
	// sharesProcess: a forked child's Process is its parent's, closed with it.
	sharesProcess bool
	// NoGCStamps, when set, says why its samples carry no GC stamp: a frame
	// whose code is freed and replaced while recording keeps the name read
	// first at its addresses.
	NoGCStamps error
	// gcUnchecked: its GC counters are yet to be checked against each other
	// (no GC had run at the attach).
	gcUnchecked bool
	// labelKeys: the name ids of the label keys (IDs) seen in its samples.
	labelKeys map[uint64]uint64
	// labels is where its request labels are (ruby-profiler's state), once
	// an extension that keeps them is loaded; labelsLook says a file was
	// mapped since the last look, and labelsLooked when that was.
	labels       *threadlocal.Var
	labelsLook   bool
	labelsLooked time.Time
	// info is what a live recording tells of it (Options.Stacks).
	info *Process
	// envs is what the environment chains walked for its samples led to.
	envs envChains
	// files is where the files read looking for request labels are
	// remembered, for the other targets that map them (nil: nowhere).
	files *threadlocal.Files
	// refills are the allocation sampler's uprobes on it (record --alloc).
	refills *bpf.Refills
}

// LabelsSymbol is the thread-local variable through which the ruby-profiler
// gem (and any extension that keeps its documented layout) publishes the
// running fiber's request labels.
const LabelsSymbol = "ruby_profiler_state"

// nameReadBytes is what a recorder reads of a String that is part of a
// name: the table keeps no more than symtab.MaxNameBytes of a label or a
// path, and one byte more tells it the String was longer (to mark the cut).
// Reading the whole 4 KiB of a long one cost the hostile shape (8 KB names)
// gigabytes of garbage a minute.
const nameReadBytes = symtab.MaxNameBytes + 1

// findLabels looks for an extension that keeps request labels in t's
// process, and makes its samples carry them when there is one.
func (t *Target) findLabels() bool {
	v, err := t.files.Find(t.PID, t.mem, LabelsSymbol)
	if err != nil {
		return false
	}
	if t.Config.ReadLabels(bpf.LabelsTLS{ModID: v.ModID, Offset: v.Offset, DTVPointer: v.DTVPointer,
		DTVEntrySize: v.DTVEntrySize, DTVVal: v.DTVVal, DTVCounter: v.DTVCounter, Generation: v.Generation,
		Static: v.Static, TPOffset: v.TPOffset}) != nil {
		return false
	}
	t.labels = v
	return true
}

// Attach prepares pid for sampling: its Ruby binary and Layout, and the
// thread-pointer offset of ruby_current_ec, read once from the main thread
// (it is the same in every thread of a process). What it reads of the files
// pid maps, looking for request labels, is remembered in files (nil:
// nowhere), as opts.Cache does for its Ruby's build.
func Attach(pid int, opts rubybuild.OpenOptions, files *threadlocal.Files) (*Target, error) {
	p, err := rubystack.OpenProcess(pid, opts)
	if err != nil {
		return nil, err
	}
	// Errors name the pid once, at the front.
	pidErr := func(err error) error {
		if strings.HasPrefix(err.Error(), fmt.Sprintf("pid %d: ", pid)) {
			return err
		}
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	t := &Target{PID: pid, Process: p, mem: &rubystack.ProcessMemory{PID: pid}, files: files}
	ok := false
	defer func() {
		if !ok {
			t.Close()
		}
	}()
	if t.Reader, err = rubystack.NewReaderFor(p, t.mem, rubybuild.UseRecord); err != nil {
		return nil, pidErr(err)
	}
	t.Reader.LimitStrings(nameReadBytes)
	ec := p.Binary.Anchors(t.Reader.Layout).CurrentEC
	var tp uint64
	if !ec.HasTPOffset {
		if tp, err = rubystack.ThreadPointer(pid, pid); err != nil {
			return nil, pidErr(err)
		}
	}
	off, err := p.CurrentECOffset(t.mem, ec, tp, files)
	if err != nil {
		return nil, pidErr(err)
	}
	if t.Config, err = bpf.ConfigFor(t.Reader.Layout, off); err != nil {
		return nil, pidErr(err)
	}
	// Samples say whether their thread held the GVL: through its own
	// Ractor where the layout says where a thread keeps it, else through
	// the main one's (threads of other Ractors are then not told apart).
	if ractor, err := t.Reader.MainRactor(); err == nil {
		t.Config.SetMainRactor(ractor)
	}
	// Request labels, if an extension that keeps them is loaded already
	// (else when one is: session.lookForLabels).
	t.findLabels()
	// Samples carry the GC's progress, and names hold for the samples they
	// can be proven right for, when the layout says where the GC keeps its
	// counters; otherwise names hold for good and NoGCStamps says why.
	os, err := t.Reader.Objspace()
	if err == nil {
		err = t.Config.StampGC(t.Reader.Layout, os)
	}
	if err == nil {
		err = t.Reader.CheckGC()
	}
	if errors.Is(err, rubystack.ErrGCNotRun) {
		// Checked once a GC has run (Session.checkGC); nothing is freed before.
		t.gcUnchecked, err = true, nil
	}
	if err != nil {
		t.Config.GcSpan = 0
		t.Reader.NoGCStamps()
		t.NoGCStamps = err
	}
	ok = true
	return t, nil
}

// Close releases the target's files.
func (t *Target) Close() {
	if t.refills != nil {
		t.refills.Close()
	}
	t.mem.Close()
	if !t.sharesProcess {
		t.Process.Close()
	}
}

// forked is the target for pid, a child t forked: until it execs it has
// t's memory image, so t's binary, layout and configuration read it. Only
// its memory is its own.
func (t *Target) forked(pid int) (*Target, error) {
	p := *t.Process
	p.PID = pid
	c := &Target{PID: pid, Process: &p, Config: t.Config, mem: &rubystack.ProcessMemory{PID: pid}, sharesProcess: true,
		NoGCStamps: t.NoGCStamps, gcUnchecked: t.gcUnchecked, files: t.files}
	var err error
	if c.Reader, err = rubystack.NewReaderFor(&p, c.mem, rubybuild.UseRecord); err != nil {
		c.Close()
		return nil, fmt.Errorf("pid %d (forked by %d): %w", pid, t.PID, err)
	}
	c.Reader.LimitStrings(nameReadBytes)
	if t.NoGCStamps != nil {
		c.Reader.NoGCStamps()
	}
	return c, nil
}

// AttachWhenReady attaches to a process that was just started, waiting
// until it has mapped its Ruby (a shared libruby is loaded after exec).
func AttachWhenReady(ctx context.Context, pid int, opts rubybuild.OpenOptions, files *threadlocal.Files) (*Target, error) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last error
	var mismatched time.Time // the first layout mismatch
	for {
		t, err := Attach(pid, opts, files)
		if err == nil {
			return t, nil
		}
		// Still starting: Ruby not mapped yet, its TLS or VM not set up yet, or
		// a mapping dropped by exec between reading the maps and opening it.
		starting := errors.Is(err, rubystack.ErrNotRuby) || errors.Is(err, rubystack.ErrTLSNotReady) ||
			errors.Is(err, rubystack.ErrVMNotReady) || goneFromProc(err)
		// A VM booting under load can show a frame half pushed to the
		// layout's check for longer than its retries: a mismatch is tried
		// again for mismatchGrace (a wrong layout fails every time).
		if errors.Is(err, rubystack.ErrLayoutMismatch) {
			if mismatched.IsZero() {
				mismatched = time.Now()
			}
			starting = time.Since(mismatched) < mismatchGrace
		}
		if !starting || !alive(pid) {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pid %d: no Ruby VM was ready in time (%v): %w", pid, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// mismatchGrace is how long AttachWhenReady tries again a process whose
// layout check failed.
const mismatchGrace = time.Second

// goneFromProc: a file under /proc vanished (a mapping dropped by exec),
// not a file the user named.
func goneFromProc(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && errors.Is(pe.Err, fs.ErrNotExist) && strings.HasPrefix(pe.Path, "/proc/")
}

// alive says whether pid is a process that has not exited: its
// /proc/PID/stat is there, and its state is not zombie or dead.
func alive(pid int) bool {
	f, err := procstat.Fields(pid)
	return err == nil && f[procstat.State] != "Z" && f[procstat.State] != "X"
}

// secureExec says why a process that exec'd is no longer recorded while
// it runs on: the kernel ends perf's events of a process, with an exit
// record, when it execs a setuid or setgid program (or one with file
// capabilities) that makes it undumpable.
const secureExec = "runs on as a setuid or setgid program the kernel hides from perf"

// pfExiting is PF_EXITING, in the flags of /proc/PID/stat: set as a
// process starts to exit, before the kernel writes its exit record.
const pfExiting = 0x4

// exiting says whether pid is exiting or gone, rather than running on
// after an exit record the kernel wrote for a secure exec.
func exiting(pid int) bool {
	f, err := procstat.Fields(pid)
	if err != nil || f[procstat.State] == "Z" || f[procstat.State] == "X" {
		return true
	}
	flags, err := strconv.ParseUint(f[procstat.Flags], 10, 64)
	return err != nil || flags&pfExiting != 0
}

// RubyPIDs lists the processes that look like Ruby: a ruby executable or a
// mapped libruby. Attach decides for sure.
func RubyPIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if looksLikeRuby(pid) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// rubyScan finds the Rubies among /proc's processes for -a's periodic
// rescan, looking at each process once while it runs the same program: a
// process found not to be a Ruby is not looked at again until its pid
// names another process (its start time changed) or notRubyRecheck has
// passed (a program may load libruby itself). Reading every process's
// maps every few seconds was a twentieth of the agent's CPU.
type rubyScan struct {
	notRuby map[int]notRuby
}

type notRuby struct {
	start string // procstat.StartTime
	at    time.Time
}

const (
	notRubyRecheck = 30 * time.Second
	maxNotRuby     = 1 << 16 // verdicts kept; past it, processes are looked at each time
)

// pids are the Rubies running now but those known says are known already.
func (r *rubyScan) pids(now time.Time, known func(pid int) bool) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	kept := make(map[int]notRuby, len(r.notRuby))
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || known(pid) {
			continue
		}
		f, err := procstat.Fields(pid)
		if err != nil || len(f) <= procstat.StartTime {
			continue // gone
		}
		start := f[procstat.StartTime]
		if v, ok := r.notRuby[pid]; ok && v.start == start && now.Sub(v.at) < notRubyRecheck {
			kept[pid] = v
			continue
		}
		if looksLikeRuby(pid) {
			out = append(out, pid)
		} else if len(kept) < maxNotRuby {
			kept[pid] = notRuby{start, now}
		}
	}
	r.notRuby = kept
	return out, nil
}

// maxMapsScan bounds the bytes of /proc/PID/maps read while looking for libruby.
const maxMapsScan = 4 << 20

// rubyName says whether an executable's name is a Ruby's: ruby, ruby3.3,
// ruby-3.3.6, not rubyperf.
func rubyName(name string) bool {
	rest, ok := strings.CutPrefix(name, "ruby")
	return ok && (rest == "" || strings.IndexByte("0123456789.-_", rest[0]) >= 0)
}

func looksLikeRuby(pid int) bool {
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil &&
		rubyName(filepath.Base(strings.TrimSuffix(exe, " (deleted)"))) {
		return true
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return false
	}
	defer f.Close()
	return mentionsLibruby(f)
}

// mentionsLibruby says whether the first maxMapsScan bytes of a maps file
// name a libruby.
func mentionsLibruby(r io.Reader) bool {
	// The buffer holds the last few bytes of the previous read before this
	// read's: a name cut between two reads is found whole.
	const keep = len("/libruby") - 1
	bp := mapsScanBuffers.Get().(*[]byte)
	defer mapsScanBuffers.Put(bp)
	buf := *bp
	have := 0
	for read := 0; read < maxMapsScan; {
		n, err := r.Read(buf[have:])
		if bytes.Contains(buf[:have+n], []byte("/libruby")) {
			return true
		}
		read += n
		if err != nil || n == 0 {
			break
		}
		have = copy(buf, buf[max(have+n-keep, 0):have+n])
	}
	return false
}

// mapsScanBuffers are looksLikeRuby's buffers: a scan of every process
// (record -a, the agent) reads each one's maps, every few seconds.
var mapsScanBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

var errNoTargets = errors.New("no Ruby process to record")

// maxCmdline bounds the bytes of /proc/PID/cmdline read to name a process.
const maxCmdline = 64 << 10

// ProcessName names a Ruby process the way a person started it: the Ruby
// and its script ("ruby3.3 app.rb"), seeing through a dynamic loader that
// runs Ruby (ld-linux.so --library-path DIRS ruby ...), which makes the
// loader the process's executable and comm.
func ProcessName(pid int) string {
	return nameFromArgs(CommandLine(pid))
}

// CommandLine is process pid's arguments (/proc/PID/cmdline, the first
// maxCmdline bytes), nil once it has exited.
func CommandLine(pid int) []string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, maxCmdline)
	n, _ := io.ReadFull(f, b)
	if n == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b[:n]), "\x00"), "\x00")
}

func nameFromArgs(args []string) string {
	if len(args) == 0 || args[0] == "" {
		return "?"
	}
	prog := args[0]
	args = args[1:]
	if strings.HasPrefix(filepath.Base(prog), "ld-linux") || strings.HasPrefix(filepath.Base(prog), "ld.so") {
		// The loader's own options, then the program it runs.
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			switch args[0] {
			case "--library-path", "--preload", "--audit", "--argv0", "--inhibit-rpath", "--glibc-hwcaps-prepend",
				"--glibc-hwcaps-mask":
				args = args[min(2, len(args)):]
			default:
				args = args[1:]
			}
		}
		if len(args) == 0 {
			return filepath.Base(prog)
		}
		prog, args = args[0], args[1:]
	}
	name := filepath.Base(prog)
	// Ruby's script: the first argument that is not an option (or -e).
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-e":
			return name + " -e"
		case a == "--":
			if i+1 < len(args) {
				return name + " " + filepath.Base(args[i+1])
			}
			return name
		case a == "-I" || a == "-r" || a == "-C" || a == "-E" || a == "-x":
			i++ // an option with a separate value
		case strings.HasPrefix(a, "-"):
		default:
			return name + " " + filepath.Base(a)
		}
	}
	return name
}
