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
// depth. One benchmark op is one second of sampling at 999 Hz.
func BenchmarkBPFRunTime(b *testing.B) {
	testruby.Privileged(b, Supported())
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF stats: %v", err)
	}
	defer stats.Close()
	r := testruby.Get(b, "source-3.3-static")
	script, _ := filepath.Abs("../testdata/ruby/depth.rb")
	for _, depth := range []int{10, 200, 2000} {
		b.Run(fmt.Sprintf("depth-%d", depth), func(b *testing.B) {
			cmd := testruby.Start(b, r, script, fmt.Sprint(depth))
			tg := prepareTB(b, cmd.Process.Pid)
			s, err := Open(Options{Frequency: 999, StackSize: 8192})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.AddProcess(tg.pid, tg.config); err != nil {
				b.Fatal(err)
			}
			frames, n := 0, 0
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := s.Run(ctx, func(rec Record) error {
					if smp, err := DecodeSample(rec.Data); err == nil && rec.Header.Type == 9 {
						if p, err := DecodePayload(smp.Raw); err == nil {
							frames += len(p.Frames)
							n++
						}
					}
					return nil
				})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
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
		})
	}
}
