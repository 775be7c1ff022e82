package rubystack

import (
	"encoding/binary"
	"regexp"
	"strconv"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestAnchorsLiveDebian checks the anchors the disassembly finds in Debian's
// stripped libruby against a running Debian Ruby, with what Ruby itself
// says: the main Thread's address (Thread#inspect), the shape count
// (RubyVM.stat), and the VM's own pointers. The Layout is the one a user
// gets: the version's table, or the nearest one of its line.
func TestAnchorsLiveDebian(t *testing.T) {
	for _, flavor := range []string{"debian-3.1-bookworm", "debian-3.1-bookworm-security", "debian-3.3-trixie",
		"debian-3.3-trixie-security", "debian-3.4-experimental"} {
		t.Run(flavor, func(t *testing.T) {
			r := testruby.Get(t, flavor)
			cmd, lines := testruby.StartOutput(t, r, "-e", `
				puts Thread.main.inspect
				puts(RubyVM.stat.key?(:next_shape_id) ? RubyVM.stat(:next_shape_id) : -1)
				puts "ready"
				$stdout.flush
				sleep`)
			if len(lines) < 2 {
				t.Fatalf("ruby printed %q", lines)
			}
			m := regexp.MustCompile(`#<Thread:0x([0-9a-f]+)`).FindStringSubmatch(lines[0])
			if m == nil {
				t.Fatalf("Thread.main.inspect = %q", lines[0])
			}
			mainThread, _ := strconv.ParseUint(m[1], 16, 64)
			nextShape, _ := strconv.ParseInt(lines[1], 10, 64)

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
			mem := &ProcessMemory{PID: pid}
			defer mem.Close()
			a := p.Binary.Anchors(l)
			if err := a.Usable(rubybuild.UseRecord | rubybuild.UseSnapshot); err != nil {
				t.Fatal(err)
			}
			for _, x := range a.List() {
				if x.Found {
					t.Logf("%-22s %s", x.Name, x.How)
				}
			}
			word := func(addr uint64) uint64 {
				t.Helper()
				w, err := ReadWord(mem, addr)
				if err != nil {
					t.Fatalf("read %#x: %v", addr, err)
				}
				return w
			}

			// ruby_current_ec: the main thread's EC names the main Thread.
			tp, err := ThreadPointer(pid, pid)
			testskip.Privileged(t, err)
			off, err := p.CurrentECOffset(mem, a.CurrentEC, tp, nil)
			if err != nil {
				t.Fatal(err)
			}
			ec := word(uint64(int64(tp) + off))
			th := word(ec + uint64(l.ExecutionContext.ThreadPtr))
			if self := word(th + 16); self != mainThread { // rb_thread_t.self (rb_thread_current reads it)
				t.Errorf("ruby_current_ec: ec %#x -> thread %#x -> self %#x, Thread.main is %#x", ec, th, self, mainThread)
			}

			// ruby_current_vm_ptr: the VM has an objspace, and is the
			// thread's VM (rb_thread_t.vm, right after self and ractor).
			vm := word(p.Bias + a.VMPtr.Address)
			if vm == 0 || word(vm+uint64(l.VM.ObjSpace)) == 0 {
				t.Errorf("ruby_current_vm_ptr: vm %#x", vm)
			}
			if got := word(th + 32); got != vm {
				t.Errorf("ruby_current_vm_ptr: %#x, the main thread's vm %#x", vm, got)
			}

			// ruby_global_symbols: a plausible counter, and ids an Array.
			var b4 [4]byte
			if err := mem.ReadAt(b4[:], p.Bias+a.GlobalSymbols.Address+uint64(l.Symbols.LastID)); err != nil {
				t.Fatal(err)
			}
			counter := binary.LittleEndian.Uint32(b4[:])
			ids := word(p.Bias + a.GlobalSymbols.Address + uint64(l.Symbols.IDs))
			if counter < 1000 || counter > 1<<24 || ids == 0 || ids&7 != 0 || word(ids)&0x1f != 7 /* T_ARRAY */ {
				t.Errorf("ruby_global_symbols: counter %d, ids %#x", counter, ids)
			}

			// rb_shape_tree_ptr: next_shape_id (after shape_list and
			// root_shape) is what RubyVM.stat says.
			if a.ShapeTree.Found && !a.ShapeTreeIsStruct {
				tree := word(p.Bias + a.ShapeTree.Address)
				if err := mem.ReadAt(b4[:], tree+16); err != nil {
					t.Fatal(err)
				}
				if got := int64(binary.LittleEndian.Uint32(b4[:])); got != nextShape {
					t.Errorf("rb_shape_tree_ptr: next_shape_id %d, RubyVM.stat %d", got, nextShape)
				}
			}
		})
	}
}
