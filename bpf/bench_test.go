package bpf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	perf "github.com/elastic/go-perf"
	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/internal/procstat"
	"github.com/rubyperf/rubyperf/internal/profilerstate"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/native"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/threadlocal"
)

// BenchmarkBPFRunTime measures the program's mean run time per sample, from
// the kernel's BPF statistics, while a Ruby spins at a stack of a given
// depth, with a given user stack copy (done inside bpf_perf_event_output).
// Frames are marked named as the recorder does, so after the first samples
// they go to the batched rings. One benchmark op is one second of sampling
// at 999 Hz.
//
// A/B variants: "nothread" is the default configuration with EcThread = 0
// (no read of the thread's state: its Ractor, unblock.func and the GVL
// owner); shape "labels" is testdata/ruby/labels.rb (fibers serving labelled
// requests), whose variant "labels" reads the request labels (ruby-profiler's
// state, 2 pairs); variant "native" unwinds the user stack in the program
// (Sampler.UnwindMappings) and its peer does not (shape "blocks" is
// testdata/ruby/nativedeep.rb, 60 Ruby levels that re-enter the interpreter
// natively at each, at depth 0). A variant's run alternates its configuration with its
// peer's (the default; labels.rb without ReadLabels) every window, so that
// both share the run's noise: the variant's figures are its windows', and
// the peer's and the paired difference (each variant window less the peer
// window beside it) are reported beside them.
func BenchmarkBPFRunTime(b *testing.B) {
	testskip.Privileged(b, Supported())
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF stats: %v", err)
	}
	defer stats.Close()
	r := testruby.Get(b, "source-3.3-static")
	script, _ := filepath.Abs("../testdata/ruby/depth.rb")
	// shape "depth" is one method's recursion; "distinct" distinct methods
	// with a block every third (depth.rb); "labels" labels.rb, at the depth
	// its fibers have (depth 0).
	type config struct {
		shape        string
		depth, stack int
		variant      string // "", "nothread" or "labels" (see above)
	}
	configs := []config{
		{"depth", 10, 8192, ""}, {"depth", 10, 8192, "nothread"}, {"depth", 200, 8192, ""},
		{"distinct", 200, 8192, ""}, {"distinct", 200, 8192, "nothread"}, {"depth", 2000, 8192, ""},
		{"distinct", 2000, 8192, ""}, {"depth", 10, 0, ""}, {"distinct", 200, 0, ""}, {"depth", 10, 2048, ""},
		{"distinct", 200, 2048, ""}, {"distinct", 200, 32768, ""},
		{"labels", 0, 8192, "labels"},
		{"depth", 10, 0, "native"}, {"depth", 200, 0, "native"}, {"distinct", 200, 0, "native"},
		{"blocks", 0, 0, "native"}, {"blocks", 0, 8192, ""}, {"blocks", 0, 32768, ""},
	}
	name := func(c config) string {
		n := fmt.Sprintf("%s-%d-stack-%d", c.shape, c.depth, c.stack)
		if c.variant != "" {
			n += "-" + c.variant
		}
		return n
	}
	if only := os.Getenv("RUBYPERF_BENCH_BPF"); only != "" { // for A/B runs: "distinct-200-stack-8192,depth-10-stack-8192-nothread,..."
		configs = slices.DeleteFunc(configs, func(c config) bool {
			return !slices.Contains(strings.Split(only, ","), name(c))
		})
	}
	for _, cf := range configs {
		b.Run(name(cf), func(b *testing.B) {
			var tg target
			var labelled ProcessConfig
			switch cf.shape {
			case "labels":
				tg, labelled = startLabelled(b, r)
			case "blocks":
				blocks, _ := filepath.Abs("../testdata/ruby/nativedeep.rb")
				cmd := testruby.Start(b, r, blocks, "3600")
				tg = prepareTB(b, cmd.Process.Pid)
			default:
				args := []string{fmt.Sprint(cf.depth)}
				if cf.shape == "distinct" {
					args = append(args, "distinct")
				}
				cmd := testruby.Start(b, r, append([]string{script}, args...)...)
				tg = prepareTB(b, cmd.Process.Pid)
			}
			if os.Getenv("RUBYPERF_BENCH_NO_GC_STAMPS") != "" { // A/B: the cost of the GC stamp
				tg.config.GcSpan = 0
			}
			// arms: the variant's configuration, then its peer's.
			var arms []ProcessConfig
			switch cf.variant {
			case "nothread":
				if !tg.config.HasThreadState() {
					b.Skip("the default configuration reads no thread state here: nothing to compare")
				}
				without := tg.config
				without.EcThread = 0 // turns every read of the thread's state off
				arms = []ProcessConfig{without, tg.config}
			case "labels":
				arms = []ProcessConfig{labelled, tg.config}
			}
			if arms != nil {
				tg.config = arms[0]
			}
			s, err := Open(Options{Frequency: 999, StackSize: uint32(cf.stack)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.AddProcess(tg.pid, tg.config); err != nil {
				b.Fatal(err)
			}
			var switchArm []func()
			for _, cfg := range arms {
				switchArm = append(switchArm, func() { s.Reconfigure(tg.pid, cfg) })
			}
			if cf.variant == "native" {
				objs := &native.Objects{}
				unwind := func() {
					if n, err := s.UnwindMappings(tg.pid, processMappings(b, tg.pid), objs); n == 0 {
						b.Fatalf("no mapping with unwind rows: %v", err)
					}
				}
				unwind()
				switchArm = []func(){unwind, func() { s.RemoveExecMaps(tg.pid) }}
				arms = make([]ProcessConfig, 2) // (only counted)
			}
			rd := &benchReader{s: s, named: map[[3]uint64]bool{}}
			// One Run for all ops: Run stops sampling when it returns.
			b.ResetTimer()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*time.Second)
			windows := make(chan []counters, 1)
			go func() { windows <- s.windows(ctx, switchArm...) }()
			err = s.Run(ctx, rd.record)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			st, err := s.objs.SampleRuby.Stats()
			if err != nil {
				b.Fatal(err)
			}
			rt, runs := st.Runtime, st.RunCount
			c, _ := s.Counts()
			if c.Samples == 0 || rd.n == 0 {
				b.Fatal("no samples")
			}
			// This machine's CPUs are shared: a window in which the host
			// took the CPU away mid-program inflates the mean, so the
			// figure is the median window, with the spread beside it.
			w := <-windows
			all := func(w counters) (uint64, uint64) { return w.sampleRT, w.samples }
			if n := sampledWindows(w, all); n < 3 {
				b.Fatalf("%d measurement windows, want at least 3", n)
			}
			perSample := onArm(0, all) // the variant's windows; without one, every window
			if arms != nil {
				if sampledWindows(w, onArm(1, all)) == 0 || sampledWindows(w, perSample) == 0 {
					b.Fatal("a configuration of the A/B pair has no measurement window")
				}
				peer := onArm(1, all)
				b.ReportMetric(windowQuantile(w, 0.5, peer), "peer-ns/sample")
				b.ReportMetric(windowQuantile(w, 0.1, peer), "p10-peer-ns/sample")
				b.ReportMetric(windowQuantile(w, 0.9, peer), "p90-peer-ns/sample")
				d := pairedDiffs(w, all)
				b.ReportMetric(quantile(d, 0.5), "diff-ns/sample")
				b.ReportMetric(float64(len(d)), "pairs")
			}
			b.ReportMetric(windowQuantile(w, 0.5, perSample), "ns/sample")
			b.ReportMetric(windowQuantile(w, 0.1, perSample), "p10-ns/sample")
			b.ReportMetric(windowQuantile(w, 0.9, perSample), "p90-ns/sample")
			b.ReportMetric(float64(rt.Nanoseconds())/float64(c.Samples), "mean-ns/sample")
			b.ReportMetric(float64(rt.Nanoseconds())/float64(runs), "ns/run")
			b.ReportMetric(float64(rd.frames)/float64(rd.n), "frames/sample")
			if rd.unwound > 0 {
				b.ReportMetric(float64(rd.natives)/float64(rd.unwound), "natives/unwound-sample")
			}
			b.ReportMetric(float64(c.OutputErrors), "lost")
			b.ReportMetric(float64(c.Urgent)/float64(c.Samples), "urgent/sample")
			if cf.shape == "labels" {
				b.ReportMetric(float64(rd.labels)/float64(max(1, rd.labelled)), "labels/labelled-sample")
			}
		})
	}
}

// BenchmarkOffCPU measures the off-CPU program (tp_btf/sched_switch,
// Options.Wall), which runs on every context switch of the machine, while
// the threads of a target are followed (FollowWall) and sampled at 999 Hz:
// its run time per run, the same before the target is added (what a switch
// of any other thread costs), per off-CPU sample taken (Counts.OffCPU) with
// every run's time counted, and with the other runs' idle cost taken out;
// and, its peer in the same run, sample_ruby's time per cpu-clock sample.
// Figures are medians of 250 ms windows, like BenchmarkBPFRunTime's. One
// benchmark op is one second of sampling.
//
// Targets: "gvl" is testdata/ruby/states.rb gvl, three CPU-bound threads
// handing the GVL on when the VM's timer says (tens of switches a second
// when the machine is quiet); "pass" three threads calling Thread.pass
// after every slice of work (thousands), where off-CPU samples outnumber
// the program's other runs.
func BenchmarkOffCPU(b *testing.B) {
	testskip.Privileged(b, Supported())
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF stats: %v", err)
	}
	defer stats.Close()
	r := testruby.Get(b, "source-3.3-static")
	script, _ := filepath.Abs("../testdata/ruby/states.rb")
	const pass = `def fib(n) = n < 2 ? n : fib(n - 1) + fib(n - 2)
3.times.map { |i| Thread.new { Thread.current.name = "pass#{i}"; loop { 20.times { fib(12) }; Thread.pass } } }.each(&:join)`
	for _, tc := range []struct {
		name, threads string // the target's threads' names start with threads
		args          func(n int) []string
	}{
		// states.rb works for SECONDS after a first second of sleep.
		{"gvl", "spin", func(n int) []string { return []string{script, "gvl", strconv.Itoa(n + 10)} }},
		{"pass", "pass", func(int) []string { return []string{"-e", pass} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			// It is killed when the run ends.
			cmd := exec.Command(r.Exe, tc.args(b.N)...)
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := cmd.Process.Pid
			waitFor(b, 30*time.Second, "three threads named "+tc.threads, func() bool { return threadsNamed(pid, tc.threads) >= 3 })
			benchOffCPU(b, pid)
		})
	}
}

// benchOffCPU is BenchmarkOffCPU on the running target pid.
func benchOffCPU(b *testing.B, pid int) {
	tg := prepareTB(b, pid)
	tg.config.FollowWall(true)
	s, err := Open(Options{Frequency: 999, StackSize: 8192, Wall: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// What a context switch of a thread that is no target costs: the
	// program attached, the target running but not added yet.
	idleCtx, idleCancel := context.WithTimeout(context.Background(), 4*measureWindow+measureWindow/2)
	idleW := s.windows(idleCtx)
	idleCancel()
	perRun := func(w counters) (uint64, uint64) { return w.offRT, w.offRuns }
	if sampledWindows(idleW, perRun) == 0 {
		b.Fatal("the off-CPU program did not run before the target was added")
	}
	idle := windowQuantile(idleW, 0.5, perRun)
	rd := &benchReader{s: s, named: map[[3]uint64]bool{}}
	b.ResetTimer()
	begin, ok := s.counters()
	if !ok {
		b.Fatal("read the programs' statistics")
	}
	start := time.Now()
	if err := s.AddProcess(tg.pid, tg.config); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*time.Second)
	windows := make(chan []counters, 1)
	go func() { windows <- s.windows(ctx) }()
	err = s.Run(ctx, rd.record)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(start).Seconds()
	end, ok := s.counters()
	if !ok {
		b.Fatal("read the programs' statistics")
	}
	c, _ := s.Counts()
	all := end.sub(begin)
	if all.offSamples == 0 || all.samples <= all.offSamples || rd.n == 0 {
		b.Fatalf("%d off-CPU samples, %d in all: want both kinds", all.offSamples, all.samples)
	}
	w := <-windows
	offSample := func(w counters) (uint64, uint64) { return w.offRT, w.offSamples }
	// Each window's off-CPU time less what its runs that took no sample
	// would have cost had they been idle ones: the sample's own cost, its
	// end (the ring's record when the thread is back) included.
	sampling := func(w counters) (uint64, uint64) {
		other := float64(w.offRuns-min(w.offRuns, w.offSamples)) * idle
		return uint64(max(0, float64(w.offRT)-other)), w.offSamples
	}
	// COUNT_SAMPLES counts off-CPU samples too: sample_ruby's are the rest.
	cpuSample := func(w counters) (uint64, uint64) { return w.sampleRT, w.samples - min(w.samples, w.offSamples) }
	if n := sampledWindows(w, offSample); n < 3 {
		b.Fatalf("%d measurement windows with off-CPU samples, want at least 3", n)
	}
	b.ReportMetric(windowQuantile(w, 0.5, perRun), "offcpu-ns/run")
	b.ReportMetric(idle, "idle-ns/run")
	b.ReportMetric(windowQuantile(w, 0.5, offSample), "offcpu-ns/sample")
	b.ReportMetric(windowQuantile(w, 0.1, offSample), "p10-offcpu-ns/sample")
	b.ReportMetric(windowQuantile(w, 0.9, offSample), "p90-offcpu-ns/sample")
	b.ReportMetric(windowQuantile(w, 0.5, sampling), "sampling-ns/sample")
	b.ReportMetric(windowQuantile(w, 0.5, cpuSample), "cpu-ns/sample")
	b.ReportMetric(windowQuantile(w, 0.1, cpuSample), "p10-cpu-ns/sample")
	b.ReportMetric(windowQuantile(w, 0.9, cpuSample), "p90-cpu-ns/sample")
	b.ReportMetric(float64(all.offSamples)/took, "offcpu-samples/s")
	b.ReportMetric(float64(all.samples-all.offSamples)/took, "cpu-samples/s")
	b.ReportMetric(float64(all.offRuns)/took, "switches/s")
	b.ReportMetric(float64(rd.ends)/float64(all.offSamples), "ends/offcpu-sample")
	b.ReportMetric(float64(rd.frames)/float64(rd.n), "frames/sample")
	b.ReportMetric(float64(c.OutputErrors+c.OffCPUEndsLost), "lost")
}

// benchReader handles the records of a benchmark's Run: it marks the
// frames of samples named as the recorder does, so that after the first
// samples they go to the batched rings, and counts what the samples held.
type benchReader struct {
	s                 *Sampler
	named             map[[3]uint64]bool
	n, frames, labels int // samples decoded; their frames and labels
	natives, unwound  int // native frames; samples unwound natively
	labelled          int // samples with labels
	ends              int // ends of off-CPU intervals (Options.Wall)
}

func (rd *benchReader) record(rec Record) error {
	if rec.OffCPUEnd != nil {
		rd.ends++
		return nil
	}
	if rec.Header.Type != perf.RecordTypeSample {
		return nil
	}
	smp, err := sampleOf(rd.s, rec)
	if err != nil {
		return nil
	}
	p, err := payload.Decode(smp.Raw)
	if err != nil {
		return nil
	}
	rd.frames += len(p.Frames)
	rd.natives += len(p.Natives)
	if p.NativeStop != payload.NativeOff {
		rd.unwound++
	}
	rd.labels += len(p.Labels)
	if len(p.Labels) > 0 {
		rd.labelled++
	}
	rd.n++
	// As the recorder marks old code: for the rest of the epoch.
	span := payload.FullSpan
	if p.GC.Stamped {
		span = payload.Span{Epoch: p.GC.Epoch, From: 0, To: ^uint64(0)}
	}
	for _, f := range p.Frames {
		if k := [3]uint64{f.Iseq, f.PC, span.Epoch}; !rd.named[k] {
			rd.named[k] = true
			rd.s.MarkNamed(p.PID, p.Gen, []payload.NamedFrame{{Frame: f, Span: span}})
		}
	}
	return nil
}

// startLabelled starts testdata/ruby/labels.rb with the profiler state
// extension, waits until its work is under way, and prepares it. labelled
// is its configuration with the request labels read (found with
// threadlocal, as the recorder finds them).
func startLabelled(b *testing.B, r testruby.Ruby) (tg target, labelled ProcessConfig) {
	b.Helper()
	so := profilerstate.Build(b, r)
	// It works for a day: it is killed when the benchmark ends.
	cmd := exec.Command(r.Exe, profilerstate.WorkloadPath(b), "86400", so)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	mem := &rubystack.ProcessMemory{PID: pid}
	b.Cleanup(func() { mem.Close() })
	var v *threadlocal.Var
	var findErr error
	waitFor(b, 30*time.Second, "the extension's thread-local state", func() bool {
		v, findErr = threadlocal.Find(pid, mem, profilerstate.Symbol)
		return findErr == nil
	})
	// The workload sleeps a second after loading the extension, then
	// burns CPU: sampling starts once it has burnt some.
	cpu0, _ := procstat.CPU(pid)
	waitFor(b, 30*time.Second, "labels.rb's work", func() bool {
		cpu, _ := procstat.CPU(pid)
		return cpu-cpu0 >= 200*time.Millisecond
	})
	tg = prepareTB(b, pid)
	labelled = tg.config
	err := labelled.ReadLabels(LabelsTLS{ModID: v.ModID, Offset: v.Offset, DTVPointer: v.DTVPointer,
		DTVEntrySize: v.DTVEntrySize, DTVVal: v.DTVVal, DTVCounter: v.DTVCounter, Generation: v.Generation,
		Static: v.Static, TPOffset: v.TPOffset})
	if err != nil {
		b.Fatal(err)
	}
	return tg, labelled
}

// waitFor polls ok every 20 ms until it holds, failing b after limit.
func waitFor(b *testing.B, limit time.Duration, what string, ok func() bool) {
	b.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %v", what, limit)
		}
	}
}

// threadsNamed counts pid's threads whose name starts with prefix.
func threadsNamed(pid int, prefix string) int {
	comms, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/comm", pid))
	n := 0
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.HasPrefix(string(b), prefix) {
			n++
		}
	}
	return n
}

// measureWindow is how long one measurement window lasts.
const measureWindow = 250 * time.Millisecond

// counters are the programs' run-time statistics and the sample counters at
// one moment, or their change over one window.
type counters struct {
	arm                 int    // a window's: the configuration in effect (see windows)
	sampleRT            uint64 // ns sample_ruby ran
	offRT, offRuns      uint64 // ns offcpu ran, and its runs (Options.Wall)
	samples, offSamples uint64 // Counts.Samples (off-CPU ones included), Counts.OffCPU
}

func (c counters) sub(o counters) counters {
	return counters{0, c.sampleRT - o.sampleRT, c.offRT - o.offRT, c.offRuns - o.offRuns, c.samples - o.samples,
		c.offSamples - o.offSamples}
}

// counters reads the programs' statistics and counters.
func (s *Sampler) counters() (counters, bool) {
	st, err := s.objs.SampleRuby.Stats()
	if err != nil {
		return counters{}, false
	}
	off, err := s.objs.Offcpu.Stats()
	if err != nil {
		return counters{}, false
	}
	c, err := s.Counts()
	if err != nil {
		return counters{}, false
	}
	return counters{0, uint64(st.Runtime.Nanoseconds()), uint64(off.Runtime.Nanoseconds()), off.RunCount, c.Samples,
		c.OffCPU}, true
}

// windows snapshots the counters every measureWindow until ctx ends, and
// returns each window's change. With arms (functions putting a
// configuration in effect; the first is at the start), each window starts
// with the next arm in turn, its counters' arm.
func (s *Sampler) windows(ctx context.Context, arms ...func()) []counters {
	var out []counters
	arm := 0
	last, ok := s.counters()
	tick := time.NewTicker(measureWindow)
	defer tick.Stop()
	for {
		done := false
		select {
		case <-ctx.Done():
			// A window that ended with the run still counts: select
			// would otherwise drop it half the time.
			select {
			case <-tick.C:
				done = true
			default:
				return out
			}
		case <-tick.C:
		}
		now, ok2 := s.counters()
		if ok && ok2 {
			w := now.sub(last)
			w.arm = arm
			out = append(out, w)
		}
		if done {
			return out
		}
		last, ok = now, ok2
		if len(arms) > 1 {
			arm = (arm + 1) % len(arms)
			arms[arm]()
			// The samples taken while it changed count in no window.
			last, ok = s.counters()
		}
	}
}

// sampledWindows counts the windows in which per's denominator is not 0.
func sampledWindows(ws []counters, per func(counters) (num, den uint64)) int {
	n := 0
	for _, w := range ws {
		if _, den := per(w); den > 0 {
			n++
		}
	}
	return n
}

// windowQuantile is the q-quantile of num/den over the windows whose den
// is not 0 (per gives them: run time and samples, say).
func windowQuantile(ws []counters, q float64, per func(counters) (num, den uint64)) float64 {
	var v []float64
	for _, w := range ws {
		if num, den := per(w); den > 0 {
			v = append(v, float64(num)/float64(den))
		}
	}
	return quantile(v, q)
}

// quantile is the q-quantile of v, the nearest rank (0 for none).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[int(q*float64(len(v)-1)+0.5)]
}

// onArm is per on the windows of one arm only.
func onArm(arm int, per func(counters) (num, den uint64)) func(counters) (num, den uint64) {
	return func(w counters) (uint64, uint64) {
		if w.arm != arm {
			return 0, 0
		}
		return per(w)
	}
}

// pairedDiffs pairs the windows of arms 0 and 1 as they came, two by two,
// and returns for each pair arm 0's num/den less arm 1's.
func pairedDiffs(ws []counters, per func(counters) (num, den uint64)) []float64 {
	var d []float64
	for i := 0; i+1 < len(ws); i += 2 {
		a, z := ws[i], ws[i+1]
		if a.arm == z.arm {
			continue
		}
		if a.arm != 0 {
			a, z = z, a
		}
		na, da := per(a)
		nz, dz := per(z)
		if da > 0 && dz > 0 {
			d = append(d, float64(na)/float64(da)-float64(nz)/float64(dz))
		}
	}
	return d
}
