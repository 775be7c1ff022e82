package rubystack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// slotsScript makes strings of known ages (old: through four GCs; one:
// through one minor GC; zero: made after the last GC) and fibers, which
// have no write barriers (printed as of age 9), and prints, for each, its
// age and what ObjectSpace.dump says of it: address, marked, and
// wb_protected where it has them.
const slotsScript = `require "objspace"
GC.disable
$old = Array.new(50) { |i| "old #{i}" }
GC.enable
4.times { GC.start }
$one = Array.new(50) { |i| "one #{i}" }
GC.start(full_mark: false)
$zero = Array.new(50) { |i| "zero #{i}" }
$fibers = Array.new(50) { Fiber.new {} }
{3 => $old, 1 => $one, 0 => $zero, 9 => $fibers}.each do |age, objs|
  objs.each { |o| STDOUT.puts "#{age} #{ObjectSpace.dump(o)}" }
end
STDOUT.puts "ready"; STDOUT.flush; sleep`

// TestReadSlots: on every test Ruby, the slots of strings of known ages
// read in one batch hold strings, each of the age it has (from its flags
// up to 3.2, its page's age bits from 3.3; Age says the same), and marked
// and with write barriers as ObjectSpace.dump says where the layout tells
// it, as the fibers' are not; ReadSlot reads each alike; an unmapped
// address in the batch fails alone.
func TestReadSlots(t *testing.T) {
	for _, r := range testruby.All(t) {
		t.Run(r.Name, func(t *testing.T) {
			cmd, lines := testruby.StartOutput(t, r, "-e", slotsScript)
			p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
			testskip.Privileged(t, err)
			defer p.Close()
			mem := &ProcessMemory{PID: cmd.Process.Pid}
			defer mem.Close()
			rd, err := NewReader(p, mem)
			if err != nil {
				t.Fatal(err)
			}
			if !rd.AgesKnown() {
				t.Fatalf("layout %s tells no ages", rd.Layout.Source)
			}
			type object struct {
				age    int
				addr   uint64
				marked bool
				wb     bool // wb_protected
			}
			var objs []object
			for _, l := range lines {
				var o object
				var dump string
				if _, err := fmt.Sscanf(l, "%d %s", &o.age, &dump); err != nil {
					t.Fatalf("the Ruby printed %q: %v", l, err)
				}
				var d struct {
					Address string
					Flags   map[string]any
				}
				if err := json.Unmarshal([]byte(l[2:]), &d); err != nil {
					t.Fatalf("dump %q: %v", l, err)
				}
				if o.addr, err = strconv.ParseUint(d.Address, 0, 64); err != nil {
					t.Fatalf("address %q: %v", d.Address, err)
				}
				o.marked = d.Flags["marked"] == true
				o.wb = d.Flags["wb_protected"] == true
				if age, ok := d.Flags["age"].(float64); ok && int(age) != o.age && o.age != 9 { // 4.0 says
					t.Fatalf("the Ruby's own age of %#x is %v, not %d", o.addr, age, o.age)
				}
				objs = append(objs, o)
			}
			if len(objs) != 200 {
				t.Fatalf("%d objects printed, want 200", len(objs))
			}
			addrs := []uint64{0x10}
			for _, o := range objs {
				addrs = append(addrs, o.addr)
			}
			out, ok := make([]SlotObject, len(addrs)), make([]bool, len(addrs))
			if err := rd.ReadSlots(addrs, out, ok); err != nil {
				t.Fatal(err)
			}
			if ok[0] {
				t.Errorf("address 0x10 read: %+v", out[0])
			}
			wrong := 0
			for i, o := range objs {
				s := out[i+1]
				one, err := rd.ReadSlot(o.addr)
				if o.age == 9 { // a fiber
					if typ := s.Type(rd); !ok[i+1] || typ != uint64(rd.Layout.Constants["RUBY_T_DATA"]) || o.wb || !s.WBKnown || !s.WBUnprotected {
						t.Errorf("%#x: %+v (read %v), want a T_DATA without write barriers (ObjectSpace.dump: wb_protected %v)", o.addr, s, ok[i+1], o.wb)
					}
					continue
				}
				age, ageErr := rd.Age(o.addr)
				switch {
				case !ok[i+1] || err != nil:
					t.Errorf("%#x (age %d): not read (%v)", o.addr, o.age, err)
				case s.Type(rd) != uint64(rd.Layout.Constants["RUBY_T_STRING"]) || !s.AgeKnown:
					t.Errorf("%#x: %+v, want a string of known age", o.addr, s)
				case !o.wb || !s.WBKnown || s.WBUnprotected:
					t.Errorf("%#x: %+v, want a string with write barriers (ObjectSpace.dump: wb_protected %v)", o.addr, s, o.wb)
				case ageErr != nil || age != s.Age:
					t.Errorf("%#x: Age %d (%v), ReadSlot's %d", o.addr, age, ageErr, s.Age)
				case s.Age != o.age || s.MarkKnown && s.Marked != o.marked:
					if wrong++; wrong <= 5 {
						t.Errorf("%#x: age %d marked %v (known %v), want age %d marked %v", o.addr, s.Age, s.Marked, s.MarkKnown, o.age, o.marked)
					}
				case one != s:
					t.Errorf("%#x: ReadSlot %+v, in a batch %+v", o.addr, one, s)
				}
			}
			if rd.Layout.MarksInPages() && !out[1].MarkKnown {
				t.Errorf("the layout has mark bits, none read")
			}
		})
	}
}
