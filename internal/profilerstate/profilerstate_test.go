package profilerstate

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// apiScript checks the Ruby API and, through .published (which decodes the
// structure the thread-local pointer shows and checks it against the
// documented lookup), what is published at each point: per fiber, restored
// on exit and on raise, per thread, through GC compaction and GC.stress.
const apiScript = `require ARGV[0]
P = RubyperfProfilerState
def check(what, want)
  got = [P.current, P.published]
  raise "#{what}: current #{got[0].inspect}, published #{got[1].inspect}, want #{want.inspect}" unless got == [want || {}, want]
end
check("start", nil)
a = Fiber.new do
  check("a starts with none", nil)
  P.with(request_id: "a1", endpoint: :users) do
    check("a set", {request_id: "a1", endpoint: :users})
    Fiber.yield
    check("a back", {request_id: "a1", endpoint: :users})
    P.with(endpoint: :orders, n: 3) do
      check("a merged", {request_id: "a1", endpoint: :orders, n: 3})
      Fiber.yield
      check("a merged back", {request_id: "a1", endpoint: :orders, n: 3})
    end
    check("a restored", {request_id: "a1", endpoint: :users})
  end
  check("a cleared", nil)
  :a_done
end
b = Fiber.new do
  P.with(request_id: "b1") do
    Fiber.yield
    check("b back", {request_id: "b1"})
    begin
      P.with(request_id: "b2") { raise "boom" }
    rescue RuntimeError
    end
    check("b restored after raise", {request_id: "b1"})
    Fiber.yield
  end
  :b_done
end
P.with(request_id: "main") do
  a.resume; check("main after a", {request_id: "main"})
  b.resume; check("main after b", {request_id: "main"})
  GC.start; GC.respond_to?(:compact) && GC.compact
  a.resume; b.resume
  GC.stress = true
  done = [a.resume, b.resume]
  GC.stress = false
  check("main at end", {request_id: "main"})
  raise "fibers: #{done}" unless done == [:a_done, :b_done]
end
check("main cleared", nil)
t = Thread.new { P.with(request_id: "t") { Thread.pass; P.published } }
P.with(request_id: "m") { raise "thread" unless t.value == {request_id: "t"} && P.published == {request_id: "m"} }
begin; P.with("k" => 1) {}; raise "string key accepted"; rescue TypeError; end
(1..20).each do |n|
  P.with(**(1..n).to_h { |i| [:"k#{i}", i] }) do
    _, addr, size, cap = P.layout
    raise "layout #{n}: #{P.layout}" unless addr != 0 && size == n && cap >= 2 * n && cap & (cap - 1) == 0 && cap < 4 * n
  end
end
raise "layout without labels: #{P.layout}" unless P.layout[1..] == [0, 0, 0]
puts "ok"
`

// readerScript parks in a labelled fiber, then in the main fiber with other
// labels, then with none, printing each time where the thread-local pointer
// is, where it must point and the labels (ID => Integer) to find there.
// Constant names as keys: their IDs' low bits put both at the last slot of
// a 4-slot table, so the second one is found only by wrapping around.
const readerScript = `require ARGV[0]
require "json"
$stdout.sync = true
P = RubyperfProfilerState
def park(labels)
  tls, state = P.layout
  puts JSON.generate(tls: tls, state: state, labels: labels.to_h { |k, v| [P.id_of(k).to_s, v] })
  $stdin.gets
end
f = Fiber.new do
  labels = {Region: 5, Zone: 6}
  P.with(**labels) { Fiber.yield; park(labels) }
end
P.with(request_id: 42, endpoint: 7) do
  f.resume
  park({request_id: 42, endpoint: 7})
  f.resume
end
park({})
puts "done"
`

func TestExtension(t *testing.T) {
	for _, r := range testruby.WithDWARF(t) {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			lib := Build(t, r)
			checkSymbol(t, lib)
			runs := [][]string{nil}
			for _, j := range testruby.JITs {
				if j.Has(r) {
					runs = append(runs, j.Args)
				}
			}
			for _, args := range runs {
				out, err := exec.Command(r.Exe, append(args, "-e", apiScript, lib)...).CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "ok" {
					t.Fatalf("%v: %v\n%.2000s", args, err, out)
				}
			}
			readFromOutside(t, r, lib)
		})
	}
}

// checkSymbol: what a reader outside resolves, a global TLS symbol of
// default visibility in .dynsym, one pointer wide.
func checkSymbol(t *testing.T, lib string) {
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != Symbol {
			continue
		}
		if elf.ST_TYPE(s.Info) != elf.STT_TLS || elf.ST_BIND(s.Info) != elf.STB_GLOBAL ||
			elf.ST_VISIBILITY(s.Other) != elf.STV_DEFAULT || s.Size != 8 || s.Section == elf.SHN_UNDEF {
			t.Fatalf("%s in %s: type %v, bind %v, visibility %v, size %d, section %v", Symbol, lib,
				elf.ST_TYPE(s.Info), elf.ST_BIND(s.Info), elf.ST_VISIBILITY(s.Other), s.Size, s.Section)
		}
		return
	}
	t.Fatalf("%s not in the dynamic symbols of %s", Symbol, lib)
}

// readFromOutside reads the published state through /proc/PID/mem as a
// profiler does, following the documented layout and lookup.
func readFromOutside(t *testing.T, r testruby.Ruby, lib string) {
	cmd := exec.Command(r.Exe, "-e", readerScript, lib)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	word := func(addr uint64) uint64 {
		var b [8]byte
		if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
			t.Fatalf("read %#x: %v", addr, err)
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	lines := bufio.NewScanner(stdout)
	wrapped := false
	for park := 0; park < 3; park++ {
		if !lines.Scan() {
			t.Fatalf("park %d: no line: %v", park, lines.Err())
		}
		var p struct {
			TLS, State uint64
			Labels     map[string]int64
		}
		if err := json.Unmarshal(lines.Bytes(), &p); err != nil {
			t.Fatalf("park %d: %v in %q", park, err, lines.Text())
		}
		state := word(p.TLS)
		if state != p.State || (state == 0) != (len(p.Labels) == 0) {
			t.Fatalf("park %d: pointer %#x, want %#x with labels %v", park, state, p.State, p.Labels)
		}
		if state != 0 {
			size, capacity := word(state), word(state+8)
			if size != uint64(len(p.Labels)) || capacity == 0 || capacity&(capacity-1) != 0 || capacity > 1024 {
				t.Fatalf("park %d: size %d, capacity %d, want size %d", park, size, capacity, len(p.Labels))
			}
			for key, n := range p.Labels {
				id, _ := strconv.ParseUint(key, 10, 64)
				pos, ok := lookup(word, state, capacity, id)
				// A fixnum n is the VALUE 2n+1.
				if !ok || word(state+16+16*pos+8) != uint64(2*n+1) {
					t.Fatalf("park %d: ID %d (%d) not found", park, id, n)
				}
				wrapped = wrapped || pos < id&(capacity-1)
			}
		}
		if _, err := stdin.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
	if !lines.Scan() || lines.Text() != "done" {
		t.Fatalf("no done line: %q %v", lines.Text(), lines.Err())
	}
	if !wrapped {
		t.Error("no key was found by wrapping around: the layout test misses that case")
	}
}

// lookup is the documented lookup: from key & (capacity-1) on, linearly,
// wrapping around, until the key or an empty slot.
func lookup(word func(uint64) uint64, state, capacity, key uint64) (uint64, bool) {
	for i := uint64(0); i < capacity; i++ {
		pos := (key + i) & (capacity - 1)
		switch word(state + 16 + 16*pos) {
		case key:
			return pos, true
		case 0:
			return 0, false
		}
	}
	return 0, false
}

// TestWorkload runs labels.rb briefly: every request labelled and measured,
// the endpoints' CPU in order. (The 1:2:4 ratio holds once many requests
// have run: a one-second run cuts a large share of its few requests short.)
func TestWorkload(t *testing.T) {
	for _, r := range testruby.WithDWARF(t) {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(r.Exe, "--disable-gems", WorkloadPath(t), "1")
			cmd.Env = append(os.Environ(), Env+"="+Build(t, r))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var w struct {
				UnlabeledCPU float64            `json:"unlabeled_cpu"`
				EndpointCPU  map[string]float64 `json:"endpoint_cpu"`
				Requests     map[string]struct {
					Endpoint string
					CPU      float64
				}
				Keys map[string]uint64
			}
			if err := json.Unmarshal(out, &w); err != nil {
				t.Fatalf("%v in %q", err, out)
			}
			users, orders, search := w.EndpointCPU["users"], w.EndpointCPU["orders"], w.EndpointCPU["search"]
			if users <= 0 || orders < 1.2*users || search < 1.2*orders {
				t.Errorf("endpoint CPU %v: not users < orders < search", w.EndpointCPU)
			}
			byEndpoint := map[string]float64{}
			for id, q := range w.Requests {
				k, err := strconv.Atoi(strings.TrimPrefix(id, "r"))
				if want := []string{"users", "orders", "search"}[(k-1)%3]; err != nil || q.Endpoint != want {
					t.Errorf("request %s: endpoint %s", id, q.Endpoint)
				}
				byEndpoint[q.Endpoint] += q.CPU
			}
			for e, c := range w.EndpointCPU {
				if d := byEndpoint[e] - c; d > 1e-6 || d < -1e-6 {
					t.Errorf("%s: %v CPU per endpoint, %v over its requests", e, c, byEndpoint[e])
				}
			}
			if len(w.Requests) < 6 || w.UnlabeledCPU <= 0 || w.Keys["request_id"] == 0 || w.Keys["endpoint"] == 0 {
				t.Errorf("requests %d, unlabelled CPU %v, keys %v", len(w.Requests), w.UnlabeledCPU, w.Keys)
			}
		})
	}
}
