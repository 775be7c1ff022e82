package bpf

import (
	"context"
	"fmt"
	"path/filepath"
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
	type config struct{ depth, stack int }
	configs := []config{{10, 8192}, {200, 8192}, {2000, 8192}, {200, 0}, {200, 2048}, {200, 32768}}
	for _, cf := range configs {
		depth := cf.depth
		b.Run(fmt.Sprintf("depth-%d-stack-%d", depth, cf.stack), func(b *testing.B) {
			cmd := testruby.Start(b, r, script, fmt.Sprint(depth))
			tg := prepareTB(b, cmd.Process.Pid)
			s, err := Open(Options{Frequency: 999, StackSize: uint32(cf.stack)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.AddProcess(tg.pid, tg.config); err != nil {
				b.Fatal(err)
			}
			frames, n := 0, 0
			named := map[[2]uint64]bool{}
			// One Run for all ops: Run stops sampling when it returns.
			b.ResetTimer()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*time.Second)
			err = s.Run(ctx, func(rec Record) error {
				if smp, err := DecodeSample(rec.Data); err == nil && rec.Header.Type == 9 {
					if p, err := DecodePayload(smp.Raw); err == nil {
						frames += len(p.Frames)
						n++
						for _, f := range p.Frames {
							if k := [2]uint64{f.Iseq, f.PC}; !named[k] {
								named[k] = true
								s.MarkNamed(p.PID, []Frame{f})
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
			b.ReportMetric(float64(rt.Nanoseconds())/float64(c.Samples), "ns/sample")
			b.ReportMetric(float64(rt.Nanoseconds())/float64(runs), "ns/run")
			b.ReportMetric(float64(frames)/float64(n), "frames/sample")
			b.ReportMetric(float64(c.OutputErrors), "lost")
			b.ReportMetric(float64(c.Urgent)/float64(c.Samples), "urgent/sample")
		})
	}
}
