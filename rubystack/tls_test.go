package rubystack

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestCurrentECLive reads each test Ruby's ruby_current_ec through the thread
// pointer and the TLS offset rubyperf computed, then checks the EC against
// pointers that do not go through TLS at all: the EC's thread must point back
// at the EC, its VM's main thread must be that thread (a one-thread process),
// and where the binary names ruby_current_vm_ptr, that must be the same VM;
// on every test Ruby and the musl ones (their thread pointer, their DTV).
func TestCurrentECLive(t *testing.T) {
	for _, r := range testruby.WithMusl(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd := testruby.Start(t, r, "-e", `STDOUT.sync = true; puts "ready"; sleep`)
			pid := cmd.Process.Pid
			p, err := OpenProcess(pid, rubybuild.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			l, err := p.Binary.Layout()
			if err != nil {
				t.Fatal(err)
			}
			a := p.Binary.Anchors(l)
			tp, err := ThreadPointer(pid, pid)
			testskip.Privileged(t, err)
			mem := &ProcessMemory{PID: pid}
			defer mem.Close()
			off, err := p.CurrentECOffset(mem, a.CurrentEC, tp, nil)
			if err != nil {
				t.Fatal(err)
			}
			word := func(addr uint64) uint64 {
				t.Helper()
				v, err := ReadWord(mem, addr)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			ec := word(uint64(int64(tp) + off))
			if ec == 0 {
				t.Fatal("ruby_current_ec is NULL in the main thread")
			}
			th := word(ec + uint64(l.ExecutionContext.ThreadPtr))
			if back := word(th + uint64(l.Thread.EC)); back != ec {
				t.Errorf("ec %#x -> thread %#x -> ec %#x", ec, th, back)
			}
			vm := word(th + uint64(l.Thread.VM))
			if main := word(vm + uint64(l.VM.MainThread)); main != th {
				t.Errorf("thread %#x, but its VM's main thread is %#x", th, main)
			}
			if a.VMPtr.Found {
				if got := word(p.Bias + a.VMPtr.Address); got != vm {
					t.Errorf("ruby_current_vm_ptr = %#x, thread's vm = %#x", got, vm)
				}
			}
			// The VM stack of a live EC lies in the process's memory and its
			// cfp inside it.
			stack := word(ec + uint64(l.ExecutionContext.VMStack))
			size := word(ec + uint64(l.ExecutionContext.VMStackSize))
			cfp := word(ec + uint64(l.ExecutionContext.CFP))
			if cfp <= stack || cfp >= stack+8*size {
				t.Errorf("cfp %#x outside the VM stack [%#x, %#x)", cfp, stack, stack+8*size)
			}
			t.Logf("tp_offset %d (%s), ec %#x, thread %#x, vm %#x", off, a.CurrentEC.How, ec, th, vm)
		})
	}
}

// TestOpenProcessErrors: a dead pid and a process that is not Ruby.
func TestOpenProcessErrors(t *testing.T) {
	_, err := OpenProcess(1<<22+12345, rubybuild.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("dead pid: %v", err)
	}
	_, err = OpenProcess(os.Getpid(), rubybuild.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())+": not a Ruby process") {
		t.Errorf("go test binary: %v", err)
	}
}
