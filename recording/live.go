package recording

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/symtab"
)

// Process is what a live recording knows of a process it samples.
type Process struct {
	PID  int
	Name string // ProcessName: the script a Ruby runs, else its command
	// Executable is the program's path as the process sees it (inside its
	// container, for one in a container).
	Executable  string
	RubyVersion string // "3.3.6"
}

// output is where a recording's records go: a perf.data (perfdata.Writer),
// or a live reader (Options.Stacks).
type output interface {
	AddEvent(attr perfdata.Attr, name string, ids []uint64) error
	// WriteRecord writes raw, one record (header and data). rec is raw
	// decoded and p its sample's payload decoded, where the caller has them
	// (else nil): a live reader takes them as they are.
	WriteRecord(raw []byte, rec perfdata.Record, p *payload.Payload) error
	Synthesize(event int, rec perfdata.Record) error
	SetFeature(f perfdata.Feature, data []byte) error
	// Written says whether Close wrote feature section f.
	Written(f perfdata.Feature) bool
	Flush() error
	Close() error
}

// fileOutput is a recording written to a perf.data: its records as they
// came, but each sample's Ruby and native frames, which are written as
// references into the file's frame trees (payload.TreeEncoder): a deep
// stack seen before costs a few bytes, not 24 a frame.
type fileOutput struct {
	*perfdata.Writer
	attr    perfdata.Attr
	record  perfdata.RecordBuffer // what a record not decoded by the session is decoded into
	tree    payload.TreeEncoder
	sample  perfdata.Sample
	compact []byte
}

// maxRecordSize is the largest perf record, 8-aligned (its size is a u16).
const maxRecordSize = 1<<16 - 8

func (f *fileOutput) AddEvent(a perfdata.Attr, name string, ids []uint64) error {
	f.attr = a
	return f.Writer.AddEvent(a, name, ids)
}

func (f *fileOutput) WriteRecord(raw []byte, rec perfdata.Record, _ *payload.Payload) error {
	if rec == nil && len(raw) >= 8 && perfdata.RecordType(binary.LittleEndian.Uint32(raw)) == perfdata.RecordSample {
		rec, _ = perfdata.DecodeRecordInto(raw, &f.attr, &f.record)
	}
	s, ok := rec.(*perfdata.Sample)
	if !ok || len(s.Raw) == 0 {
		return f.Writer.WriteRecord(raw)
	}
	// The record must stay within perf's 64 KiB (a full stack copy fills
	// it): a compact payload whose frames are all new is a little larger.
	limit := maxRecordSize - (len(raw) - len(s.Raw)) - 8
	c, err := f.tree.Compact(f.compact[:0], s.Raw, limit)
	if err != nil {
		return f.Writer.WriteRecord(raw) // as the program wrote it, which readers read too
	}
	f.compact = c
	f.sample = *s
	f.sample.Raw = c
	return f.Writer.Synthesize(0, &f.sample)
}

// live reads a recording as it is made: each record is decoded and taken
// as readback.ReadStacks takes a file's, and each sample is merged and handed on
// (Options.Stacks). Its methods run with the session's lock held.
type live struct {
	s      *session
	attr   perfdata.Attr
	record perfdata.RecordBuffer // what a record not decoded by the session is decoded into
	rd     *readback.Reader
	fn     func(merge.Stack, *Process)

	// exits are the threads that exited, forgotten once liveGrace has
	// passed: their last samples may still be in other rings.
	exits []exit
	// swept is when the targets were last looked for in /proc: a process
	// whose exit record the kernel dropped is found gone there.
	swept time.Time
	// Processes in another mount namespace (a container) map files by
	// paths of their own: each namespace has its own objects.
	spaces *mountSpaces
	// refused tells of mapped files not read, in any namespace.
	refused func(error)
}

type exit struct {
	pid, tid uint32
	at       time.Time
}

// liveGrace is how long a live recording keeps what it knows of a thread
// or process after its exit, for its samples still in the rings.
const liveGrace = 2 * time.Second

// Bounds of what a live recording keeps: exits waiting for their grace to
// pass (past it they are forgotten at once).
const maxExits = 1 << 16

func newLive(s *session, fn func(merge.Stack, *Process)) *live {
	l := &live{s: s, fn: fn, refused: readback.RefusedWarner(s.opts.Warn)}
	var kernel *native.Kernel
	if f, err := os.Open("/proc/kallsyms"); err == nil {
		kernel, _ = native.ParseKallsyms(io.LimitReader(f, readback.MaxKallsyms)) // the kernel's own: what it read serves
		f.Close()
	}
	objs := &native.Objects{Load: native.LoadOptions{Debuginfo: s.opts.Debuginfo}, Refused: l.refused}
	l.rd = readback.NewReader(readback.ReadOptions{Merge: s.opts.Merge}, s.symtab, kernel, objs)
	l.spaces = newMountSpaces(objs, s.opts.Debuginfo, l.refused)
	l.rd.ObjectsOf = l.spaces.objectsOf
	return l
}

func (l *live) AddEvent(a perfdata.Attr, _ string, _ []uint64) error {
	l.attr = a
	return nil
}

func (l *live) WriteRecord(raw []byte, rec perfdata.Record, p *payload.Payload) error {
	if rec == nil {
		var err error
		if rec, err = perfdata.DecodeRecordInto(raw, &l.attr, &l.record); err != nil {
			return nil // as readback.ReadStacks would stop at it; a live reader goes on
		}
		p = nil // not rec's
	}
	return l.take(rec, p)
}

func (l *live) Synthesize(_ int, rec perfdata.Record) error { return l.take(rec, nil) }

func (l *live) SetFeature(perfdata.Feature, []byte) error { return nil }
func (l *live) Flush() error                              { return nil }
func (l *live) Written(perfdata.Feature) bool             { return false }
func (l *live) Close() error                              { return nil }

// take applies a side-band record, or merges a sample (p: its payload,
// decoded and named; nil: decoded from it here) and hands it on.
func (l *live) take(rec perfdata.Record, p *payload.Payload) error {
	switch rec := rec.(type) {
	case *perfdata.Sample:
		st := l.rd.Stack(rec, p)
		l.fn(st, l.s.process(int(rec.Pid)))
	case *perfdata.Exit:
		if len(l.exits) >= maxExits {
			l.reap(time.Now().Add(liveGrace))
		}
		l.exits = append(l.exits, exit{pid: rec.Pid, tid: rec.Tid, at: time.Now()})
	default:
		l.rd.Apply(rec)
	}
	return nil
}

// reap forgets the threads and processes that exited before now-liveGrace.
func (l *live) reap(now time.Time) {
	n := 0
	for _, e := range l.exits {
		if now.Sub(e.at) < liveGrace {
			l.exits[n] = e
			n++
			continue
		}
		l.rd.ForgetThread(e.tid)
		if e.pid == e.tid {
			l.rd.ForgetProcess(e.pid)
			l.spaces.forget(e.pid)
			l.s.forget(int(e.pid))
		}
	}
	clear(l.exits[n:])
	l.exits = l.exits[:n]
	l.s.closeRetired()
	if now.Sub(l.swept) >= sweepEvery {
		l.swept = now
		for pid, t := range l.s.targets {
			if !l.s.gone[pid] && !alive(pid) {
				l.s.targetExited(t.PID)
				l.exits = append(l.exits, exit{pid: uint32(pid), tid: uint32(pid), at: now})
			}
		}
	}
}

// sweepEvery is how often a live recording looks for targets gone without
// an exit record (the kernel drops records when its ring is full).
const sweepEvery = 5 * time.Second

// process is what the recording knows of pid (s.mu held).
func (s *session) process(pid int) *Process {
	if t := s.targets[pid]; t != nil && t.info != nil {
		return t.info
	}
	return &Process{PID: pid, Name: ProcessName(pid)}
}

// describe is what a live recording tells of target t.
func describe(t *Target) *Process {
	p := &Process{PID: t.PID, Name: ProcessName(t.PID)}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", t.PID)); err == nil {
		p.Executable = exe
	}
	if t.Process != nil && t.Process.Binary != nil {
		p.RubyVersion = t.Process.Binary.Version.String()
	}
	return p
}

// forget drops what the session keeps of pid, which exited (s.mu held): a
// live recording runs for days while processes come and go.
func (s *session) forget(pid int) {
	t := s.targets[pid]
	if t == nil || !s.gone[pid] {
		return
	}
	delete(s.targets, pid)
	delete(s.gone, pid)
	delete(s.skips, pid)
	s.retired = append(s.retired, t) // closeRetired forgets its frames

}

// closeRetired closes the targets no longer sampled whose files no target
// still sampled shares (a forked child reads through its parent's binary).
func (s *session) closeRetired() {
	n := 0
	var gone map[symtab.Image]bool
	for _, t := range s.retired {
		if s.sharedBinary(t) {
			s.retired[n] = t
			n++
			continue
		}
		if gone == nil {
			gone = map[symtab.Image]bool{}
		}
		gone[symtab.Image{PID: uint32(t.PID), Gen: t.Config.Gen}] = true
		t.Close()
	}
	s.symtab.ForgetImages(gone)
	clear(s.retired[n:])
	s.retired = s.retired[:n]
}

// sharedBinary says whether a target still sampled reads through t's binary.
func (s *session) sharedBinary(t *Target) bool {
	if t.sharesProcess || t.Process == nil {
		return false
	}
	for _, o := range s.targets {
		if o != t && o.Process != nil && o.Process.Binary == t.Process.Binary {
			return true
		}
	}
	return false
}

// liveMaxNames bounds the names a live recording keeps: past it, and when
// no sample waits with names given already (off-CPU samples waiting for
// their ends), the table starts afresh. Code that makes a new name each
// time would otherwise fill it for good, and every frame after it would
// read as unknown.
const liveMaxNames = 1 << 18

// restartNames starts the symbol table afresh once it is full, or its
// memory budget spent (s.mu held).
func (s *session) restartNames() {
	if len(s.symtab.Names) < liveMaxNames && !s.symtab.Full() || len(s.off.held) > 0 {
		return
	}
	s.symtab.Restart()
	s.lastFrames, s.lastHeld = nil, 0
	s.sum.NamesRestarted++
}
