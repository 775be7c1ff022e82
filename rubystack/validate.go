package rubystack

import (
	"errors"
	"fmt"
	"time"
)

// A layout that did not come from the binary's own DWARF (a built-in table,
// the nearest table of the same minor line) is a guess about this build:
// patch releases and configure flags both move struct members, and a version
// match proves nothing. CheckLayout tests the guess against the live process
// with invariants a wrong layout breaks, before anything is read through it.

// Bounds on the check: it reads a few threads' newest frames, a few times.
const (
	checkThreads    = 32   // threads checked
	checkFrames     = 4096 // control frames checked per thread
	checkTries      = 5    // attempts per thread: a running thread can tear a read
	checkRetryPause = 2 * time.Millisecond
	// minSettled: of a running thread whose newest frames changed under the
	// read, this many of its oldest frames (one of them a named Ruby frame)
	// must pass for the read to count as a tear rather than a wrong layout;
	// or every frame older than one of the newestTorn newest, when there
	// are fewer (a shallow loop that calls C methods pushes and pops them
	// all the time): at least one, and a named one among them.
	minSettled = 3
	newestTorn = 4 // a loop calling a C method that calls others tears any of them (3.1's Time#-: the third newest)
	// movedPolls: reads of ec->cfp to see a thread move, movedPause apart:
	// 20 ms, longer than a time slice, as a thread preempted while it
	// pushed a frame does not move until it runs again (on a busy machine,
	// a newest frame with magic 0 in 1 CI run of ~20; 1 ms of polls then).
	movedPolls       = 200
	newestTornWait   = time.Second // reads of a thread torn only in its newest frames, retried this long
	movedPause       = 100 * time.Microsecond
	minVMStackWords  = 64
	maxVMStackWords  = 64 << 20 / 8
	maxCheckedString = 1 << 16
)

// LayoutMismatchError says a layout failed the live checks: reading the
// process through it would give wrong stacks.
type LayoutMismatchError struct {
	Source string // the layout's source, e.g. "table:3.3.11/x86_64"
	Reason string // the first invariant that failed, and where
}

func (e *LayoutMismatchError) Error() string {
	return fmt.Sprintf("layout %s does not fit this process (%s); reading it would give wrong stacks", e.Source, e.Reason)
}

// ErrLayoutMismatch is matched by errors.Is for a *LayoutMismatchError.
var ErrLayoutMismatch = errors.New("layout does not fit the process")

func (e *LayoutMismatchError) Is(target error) bool { return target == ErrLayoutMismatch }

// ErrVMNotReady says the process has not set up its VM yet (it is starting):
// try again shortly.
var ErrVMNotReady = errors.New("the Ruby VM is not set up yet")

// CheckLayout verifies r.Layout against the live process: the VM's main
// thread and its execution context point at each other, every checked
// thread's control frames tile its VM stack, each frame's env pointer, stack
// pointer and frame magic are plausible, Ruby frames point at instruction
// sequences (object type and imemo type) with their pc inside the
// instructions, C-method frames at method entries, and at least one frame's
// label and path read as strings. A running thread may tear a read, so each
// thread gets a few attempts; a wrong layout fails all of them.
func (r *Reader) CheckLayout() error {
	fail := func(format string, args ...any) error {
		return &LayoutMismatchError{Source: r.Layout.Source, Reason: fmt.Sprintf(format, args...)}
	}
	if r.vmPtr == 0 {
		return fail("ruby_current_vm_ptr was not found, so nothing can be checked")
	}
	r.mem.start()
	defer r.mem.stop()
	vm, err := r.o.word(r.vmPtr)
	if err != nil {
		return fail("ruby_current_vm_ptr at %#x cannot be read: %v", r.vmPtr, err)
	}
	if vm == 0 {
		return ErrVMNotReady
	}
	if err := r.checkMainThread(vm); err != nil {
		if errors.Is(err, ErrVMNotReady) {
			return err
		}
		return fail("%v", err)
	}
	threads, err := r.Threads()
	if err != nil {
		return fail("the VM's thread list: %v", err)
	}
	if len(threads) == 0 {
		return fail("the VM's thread list is empty")
	}
	named := 0
	for i, th := range threads {
		if i == checkThreads {
			break
		}
		// A thread that runs pushes and pops frames while they are read,
		// so its newest frames can tear every time (a deep recursion does
		// millions a second). A wrong layout fails the oldest frames as well,
		// which stay put: when no read is clean, one whose failure is above
		// minSettled passing oldest frames, in a thread seen to move, is a tear.
		// A thread preempted while it pushes a frame shows the same torn
		// newest frame until it runs again, which on a busy machine can
		// outlast the tries, and ec->cfp need not move (the frame pushed
		// sits where the one popped did: a CI run's frame with magic 0 after
		// `syswrite` returned and `sysread` was called). A read that fails
		// only there is retried until newestTornWait has passed: a clean
		// read then settles it.
		var last error
		passed := -1 // named frames of a clean read, else of one that tore; -1: neither
		start := time.Now()
		for try := 0; ; try++ {
			if try > 0 {
				r.mem.refresh()
				time.Sleep(checkRetryPause)
			}
			c := r.checkFrames(th.EC)
			if last = c.err; last == nil {
				passed = c.named
				break
			}
			if (c.settled >= minSettled || c.newest) && c.named > 0 && r.moved(th.EC, c.cfp) {
				passed = c.named
			}
			if try+1 >= checkTries && (passed >= 0 || !c.newest || c.named == 0 || time.Since(start) > newestTornWait) {
				break
			}
		}
		if passed < 0 {
			return fail("thread %d: %v", th.TID, last)
		}
		named += passed
	}
	if named == 0 {
		return fail("no frame of any thread has a readable label and path")
	}
	return nil
}

// checkMainThread: vm->ractor.main_thread->vm is vm, its ec points back at
// it, and its self is a T_DATA object.
func (r *Reader) checkMainThread(vm uint64) error {
	L := r.Layout
	th, err := r.o.word(vm + uint64(L.VM.MainThread))
	if err != nil {
		return fmt.Errorf("the VM's main thread cannot be read: %v", err)
	}
	if th == 0 {
		return ErrVMNotReady // a process still starting: vm is allocated before its main thread
	}
	back, err := r.o.word(th + uint64(L.Thread.VM))
	if err != nil || back != vm {
		return fmt.Errorf("the main thread %#x names VM %#x, not %#x", th, back, vm)
	}
	ec, err := r.o.word(th + uint64(L.Thread.EC))
	if err != nil {
		return fmt.Errorf("the main thread %#x: execution context: %v", th, err)
	}
	if ec == 0 {
		return ErrVMNotReady
	}
	if owner, err := r.o.word(ec + uint64(L.ExecutionContext.ThreadPtr)); err != nil || owner != th {
		return fmt.Errorf("the main thread's execution context %#x names thread %#x, not %#x", ec, owner, th)
	}
	self, err := r.o.word(th + uint64(L.Thread.Self))
	if err != nil {
		return fmt.Errorf("the main thread's self: %v", err)
	}
	if typ, err := r.o.typeOf(self); err != nil || typ != uint64(L.Constants["RUBY_T_DATA"]) {
		return fmt.Errorf("the main thread's self %#x is not a T_DATA object (type %#x, %v)", self, typ, err)
	}
	return nil
}

// frameCheck is the outcome of checking one thread's control frames once.
type frameCheck struct {
	err error  // the first failure, counting from the oldest frame, or nil
	cfp uint64 // ec->cfp as read
	// settled frames passed, oldest first (all of them when err is nil);
	// named of them had a readable label and path.
	settled, named int
	newest         bool // err is of one of the newestTorn newest frames, every older frame passed
}

// moved says whether the thread's newest frame is seen to be other than the
// one read: the thread runs, so a check of its newest frames may have torn.
// A loop that calls a C method comes back to the frame read as often as it
// leaves it, so ec->cfp is read a few times.
func (r *Reader) moved(ec, cfp uint64) bool {
	for i := 0; i < movedPolls; i++ {
		if i > 0 {
			time.Sleep(movedPause)
		}
		now, err := r.direct.word(ec + uint64(r.Layout.ExecutionContext.CFP))
		if err != nil {
			return false
		}
		if now != cfp {
			return true
		}
	}
	return false
}

// checkFrames checks the control frames of the execution context at ec,
// oldest first: the oldest frames of a running thread stay put while its
// newest change.
func (r *Reader) checkFrames(ec uint64) (c frameCheck) {
	L := r.Layout
	w := func(off int64) uint64 {
		v, err := r.o.word(ec + uint64(off))
		if err != nil {
			return 0
		}
		return v
	}
	vmStack, size, cfp := w(L.ExecutionContext.VMStack), w(L.ExecutionContext.VMStackSize), w(L.ExecutionContext.CFP)
	c.cfp = cfp
	fail := func(format string, args ...any) frameCheck {
		c.err = fmt.Errorf(format, args...)
		return c
	}
	if vmStack == 0 && cfp == 0 {
		return c // a thread being created
	}
	if size < minVMStackWords || size > maxVMStackWords {
		return fail("execution context %#x: VM stack of %d words", ec, size)
	}
	end := vmStack + 8*size
	frameSize := uint64(L.ControlFrame.Size)
	if frameSize == 0 || cfp < vmStack || cfp >= end || (end-cfp)%frameSize != 0 {
		return fail("execution context %#x: control frame %#x does not tile the VM stack [%#x, %#x) in %d-byte frames",
			ec, cfp, vmStack, end, frameSize)
	}
	magics := map[uint64]bool{}
	for _, m := range []string{"METHOD", "BLOCK", "CLASS", "TOP", "CFUNC", "IFUNC", "EVAL", "RESCUE", "DUMMY"} {
		if v, ok := L.Constants["VM_FRAME_MAGIC_"+m]; ok {
			magics[uint64(v)] = true
		}
	}
	k := L.Constants
	mask, cframe, escaped := uint64(k["VM_FRAME_MAGIC_MASK"]), uint64(k["VM_FRAME_FLAG_CFRAME"]), uint64(k["VM_ENV_FLAG_ESCAPED"])
	n := (end - cfp) / frameSize
	if n > checkFrames {
		n = checkFrames
	}
	buf := make([]byte, n*frameSize)
	if err := r.o.mem.ReadAt(buf, cfp); err != nil {
		return fail("control frames at %#x: %v", cfp, err)
	}
	for j := uint64(0); j < n; j++ {
		i := n - 1 - j // frame i counts from the newest
		c.newest = i < newestTorn && i+1 < n
		f := buf[i*frameSize:]
		at := cfp + i*frameSize
		pc, sp, is, ep := le64(f[L.ControlFrame.PC:]), le64(f[L.ControlFrame.SP:]), le64(f[L.ControlFrame.Iseq:]), le64(f[L.ControlFrame.EP:])
		if sp < vmStack || sp > at {
			return fail("control frame %d at %#x: sp %#x is outside its value stack [%#x, %#x)", i, at, sp, vmStack, at)
		}
		flags, err := r.o.word(ep)
		if err != nil {
			return fail("control frame %d at %#x: ep %#x cannot be read", i, at, ep)
		}
		if (ep < vmStack || ep >= at) && flags&escaped == 0 {
			return fail("control frame %d at %#x: ep %#x is neither on the VM stack nor an escaped env", i, at, ep)
		}
		if !magics[flags&mask] {
			return fail("control frame %d at %#x: frame magic %#x is not one of Ruby's", i, at, flags&mask)
		}
		if flags&cframe == 0 && is != 0 {
			if err := r.checkIseq(is, pc); err != nil {
				return fail("control frame %d at %#x: %v", i, at, err)
			}
			if seq, err := r.iseq(is); err == nil && seq.label != "" && seq.path != "" &&
				len(seq.label) < maxCheckedString && len(seq.path) < maxCheckedString {
				c.named++
			}
		}
		c.settled++
	}
	c.newest = false
	return c
}

// checkIseq: is is an imemo_iseq object whose instructions contain pc.
func (r *Reader) checkIseq(is, pc uint64) error {
	L := r.Layout
	typ, err := r.o.typeOf(is)
	if err != nil || typ != uint64(L.Constants["RUBY_T_IMEMO"]) {
		return fmt.Errorf("iseq %#x is not an imemo object (type %#x, %v)", is, typ, err)
	}
	if it, err := r.o.imemoType(is); err != nil || it != L.Constants["imemo_iseq"] {
		return fmt.Errorf("iseq %#x is imemo type %d, not an iseq (%v)", is, it, err)
	}
	if pc == 0 {
		return nil // a frame being set up
	}
	body, err := r.o.word(is + uint64(L.Iseq.Body))
	if err != nil || body == 0 {
		return fmt.Errorf("iseq %#x has no body (%v)", is, err)
	}
	enc, err := r.o.word(body + uint64(L.IseqBody.IseqEncoded))
	if err != nil {
		return fmt.Errorf("iseq %#x: instructions: %v", is, err)
	}
	size, err := r.o.u32(body + uint64(L.IseqBody.IseqSize))
	if err != nil {
		return fmt.Errorf("iseq %#x: instruction count: %v", is, err)
	}
	if pc < enc || pc > enc+8*uint64(size) {
		return fmt.Errorf("pc %#x is outside its iseq's instructions [%#x, %#x]", pc, enc, enc+8*uint64(size))
	}
	return nil
}
