package rubystack

import (
	"fmt"
	"os"
	"strings"
)

// maxThreads bounds the walk of a ractor's thread list.
const maxThreads = 1 << 14

// Thread is one Ruby thread and the execution context it runs: the EC of the
// fiber currently running on it (fiber switches update th->ec).
type Thread struct {
	TID  int
	Name string
	EC   uint64
	Main bool
}

// Threads lists the main ractor's Ruby threads through the VM's thread list
// (vm->ractor.main_ractor->threads.set). The list holds every Ruby thread
// with its EC, native thread id and name without stopping the process; the
// per-thread TLS slot (ruby_current_ec) would need ptrace for each thread's
// thread pointer. Threads of other ractors are not listed.
func (r *Reader) Threads() ([]Thread, error) {
	if r.vmPtr == 0 {
		return nil, fmt.Errorf("pid %d: %w", r.PID, errNoVM)
	}
	L := r.Layout
	vm, err := r.o.word(r.vmPtr)
	if err != nil || vm == 0 {
		return nil, fmt.Errorf("pid %d: the VM is not set up (yet): %v", r.PID, err)
	}
	ractor, err := r.o.word(vm + uint64(L.VM.MainRactor))
	if err != nil {
		return nil, err
	}
	mainThread, err := r.o.word(vm + uint64(L.VM.MainThread))
	if err != nil {
		return nil, err
	}
	next := uint64(L.Thread.LtNodeNext - L.Thread.LtNode)
	head := ractor + uint64(L.Ractor.ThreadsSet)
	node, err := r.o.word(head + next)
	if err != nil {
		return nil, err
	}
	var out []Thread
	for node != head {
		if len(out) >= maxThreads {
			return nil, fmt.Errorf("%w: more than %d threads", errTorn, maxThreads)
		}
		th := node - uint64(L.Thread.LtNode)
		t, err := r.thread(th, th == mainThread)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		if node, err = r.o.word(node + next); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *Reader) thread(th uint64, main bool) (Thread, error) {
	L := r.Layout
	t := Thread{Main: main}
	var err error
	if t.EC, err = r.o.word(th + uint64(L.Thread.EC)); err != nil {
		return t, err
	}
	var tid uint32
	if L.Capabilities.NativeThreadStruct {
		nt, err := r.o.word(th + uint64(L.Thread.NativeThread))
		if err != nil {
			return t, err
		}
		if nt != 0 {
			tid, err = r.o.u32(nt + uint64(L.NativeThread.TID))
		}
	} else {
		tid, err = r.o.u32(th + uint64(L.Thread.TID))
	}
	if err != nil {
		return t, err
	}
	t.TID = int(int32(tid))
	if name, err := r.o.word(th + uint64(L.Thread.Name)); err == nil && !r.o.special(name) {
		t.Name, _ = r.o.str(name)
	}
	if t.Name == "" && main {
		t.Name = "main"
	}
	if t.Name == "" && t.TID > 0 {
		// Ruby names native threads after Thread#name; unnamed ones show the
		// process's comm, as perf does.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", r.PID, t.TID)); err == nil {
			t.Name = strings.TrimSpace(string(b))
		}
	}
	return t, nil
}

// ThreadStack is one thread's symbolized stack, leaf first.
type ThreadStack struct {
	Thread
	Frames []Frame
}

// Snapshot walks and symbolizes every thread's stack.
func (r *Reader) Snapshot() ([]ThreadStack, error) {
	r.mem.start()
	defer r.mem.stop()
	threads, err := r.Threads()
	if err != nil {
		return nil, err
	}
	out := make([]ThreadStack, 0, len(threads))
	for _, t := range threads {
		raw, err := r.Walk(t.EC)
		if err != nil {
			return nil, fmt.Errorf("pid %d: thread %d: %w", r.PID, t.TID, err)
		}
		ts := ThreadStack{Thread: t, Frames: make([]Frame, 0, len(raw))}
		for _, rf := range raw {
			ts.Frames = append(ts.Frames, r.Symbolize(rf))
		}
		out = append(out, ts)
	}
	return out, nil
}

// MainRactor returns the address of the main Ractor (vm->ractor.
// main_ractor), whose threads.running_ec names the thread that holds its
// GVL.
func (r *Reader) MainRactor() (uint64, error) {
	ractor, err := r.vmPointer(r.Layout.VM.MainRactor, "vm->ractor.main_ractor")
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", r.PID, err)
	}
	return ractor, nil
}
