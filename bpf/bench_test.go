package bpf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// BenchmarkBPFRunTime measures the program's mean run time per sample, from
// the kernel's BPF statistics, while a Ruby spins at a stack of a given
// depth, with a given user stack copy (done inside bpf_perf_event_output).
// Frames are marked named as the recorder does, so after the first samples
// they go to the batched rings. One benchmark op is one second of sampling
// at 999 Hz.
func BenchmarkBPFRunTime(b *testing.B) {
	testruby.Privileged(b, Supported())
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF stats: %v", err)
	}
	defer stats.Close()
	r := testruby.Get(b, "source-3.3-static")
	script, _ := filepath.Abs("../testdata/ruby/depth.rb")
	// shape "depth" is one method's recursion; "distinct" distinct methods
	// with a block every third (depth.rb).
	type config struct {
		shape        string
		depth, stack int
	}
	configs := []config{
		{"depth", 10, 8192}, {"depth", 200, 8192}, {"distinct", 200, 8192}, {"depth", 2000, 8192},
		{"distinct", 2000, 8192}, {"depth", 10, 0}, {"distinct", 200, 0}, {"depth", 10, 2048},
		{"distinct", 200, 2048}, {"distinct", 200, 32768},
	}
	if only := os.Getenv("RUBYPERF_BENCH_BPF"); only != "" { // for A/B runs: "distinct-200-stack-8192,..."
		configs = slices.DeleteFunc(configs, func(c config) bool {
			return !slices.Contains(strings.Split(only, ","), fmt.Sprintf("%s-%d-stack-%d", c.shape, c.depth, c.stack))
		})
	}
	for _, cf := range configs {
		b.Run(fmt.Sprintf("%s-%d-stack-%d", cf.shape, cf.depth, cf.stack), func(b *testing.B) {
			args := []string{fmt.Sprint(cf.depth)}
			if cf.shape == "distinct" {
				args = append(args, "distinct")
			}
			cmd := testruby.Start(b, r, append([]string{script}, args...)...)
			tg := prepareTB(b, cmd.Process.Pid)
			if os.Getenv("RUBYPERF_BENCH_NO_GC_STAMPS") != "" { // A/B: the cost of the GC stamp
				tg.config.GcSpan = 0
			}
			s, err := Open(Options{Frequency: 999, StackSize: uint32(cf.stack)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.AddProcess(tg.pid, tg.config); err != nil {
				b.Fatal(err)
			}
			frames, n := 0, 0
			named := map[[3]uint64]bool{}
			// One Run for all ops: Run stops sampling when it returns.
			b.ResetTimer()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*time.Second)
			windows := make(chan []window, 1)
			go func() { windows <- s.windows(ctx, b) }()
			err = s.Run(ctx, func(rec Record) error {
				if smp, err := DecodeSample(rec.Data); err == nil && rec.Header.Type == 9 {
					if p, err := DecodePayload(smp.Raw); err == nil {
						frames += len(p.Frames)
						n++
						// As the recorder marks old code: for the rest of the epoch.
						span := FullSpan
						if p.GC.Stamped {
							span = Span{Epoch: p.GC.Epoch, From: 0, To: ^uint64(0)}
						}
						for _, f := range p.Frames {
							if k := [3]uint64{f.Iseq, f.PC, span.Epoch}; !named[k] {
								named[k] = true
								s.MarkNamed(p.PID, p.Gen, []NamedFrame{{Frame: f, Span: span}})
							}
						}
					}
				}
				return nil
			})
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
			if c.Samples == 0 || n == 0 {
				b.Fatal("no samples")
			}
			// This machine's CPUs are shared: a window in which the host
			// took the CPU away mid-program inflates the mean, so the
			// figure is the median window, with the spread beside it.
			w := <-windows
			if len(w) < 3 {
				b.Fatalf("%d measurement windows, want at least 3", len(w))
			}
			b.ReportMetric(windowQuantile(w, 0.5), "ns/sample")
			b.ReportMetric(windowQuantile(w, 0.1), "p10-ns/sample")
			b.ReportMetric(windowQuantile(w, 0.9), "p90-ns/sample")
			b.ReportMetric(float64(rt.Nanoseconds())/float64(c.Samples), "mean-ns/sample")
			b.ReportMetric(float64(rt.Nanoseconds())/float64(runs), "ns/run")
			b.ReportMetric(float64(frames)/float64(n), "frames/sample")
			b.ReportMetric(float64(c.OutputErrors), "lost")
			b.ReportMetric(float64(c.Urgent)/float64(c.Samples), "urgent/sample")
		})
	}
}

// measureWindow is how long one measurement window lasts.
const measureWindow = 250 * time.Millisecond

// window is the program's run time and target samples over one window.
type window struct{ runtime, samples uint64 }

// windows snapshots the run time and the target samples every
// measureWindow until ctx ends, and returns each window's share.
func (s *Sampler) windows(ctx context.Context, tb testing.TB) []window {
	snap := func() (window, bool) {
		st, err := s.objs.SampleRuby.Stats()
		if err != nil {
			return window{}, false
		}
		c, err := s.Counts()
		if err != nil {
			return window{}, false
		}
		return window{uint64(st.Runtime.Nanoseconds()), c.Samples}, true
	}
	var out []window
	last, ok := snap()
	tick := time.NewTicker(measureWindow)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		now, ok2 := snap()
		if ok && ok2 && now.samples > last.samples {
			out = append(out, window{now.runtime - last.runtime, now.samples - last.samples})
		}
		last, ok = now, ok2
	}
}

// windowQuantile is the q-quantile of the windows' run time per sample.
func windowQuantile(ws []window, q float64) float64 {
	v := make([]float64, len(ws))
	for i, w := range ws {
		v[i] = float64(w.runtime) / float64(w.samples)
	}
	slices.Sort(v)
	return v[int(q*float64(len(v)-1)+0.5)]
}
