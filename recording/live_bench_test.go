package recording

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"golang.org/x/sys/unix"
)

// errBenchDone ends the recording BenchmarkLiveSample runs inside.
var errBenchDone = errors.New("benchmark done")

// BenchmarkLiveSample measures what a live recording (the agent's) does
// with each sample the rings bring: decode it, name its Ruby frames, unwind
// and merge it, and hand the stack on. It records the bundled workload live
// until it holds benchHeldSamples samples, then takes them again, in turn,
// b.N times, inside the recording (its target attached, its names read):
// the steady state of a long recording. Run with -benchmem: allocations per
// sample are the number to watch.
//
//	go test -run '^$' -bench LiveSample -benchmem ./recording
func BenchmarkLiveSample(b *testing.B) {
	testskip.Privileged(b, bpf.Supported())
	r := testruby.Get(b, "debian-3.3")
	cmd := testruby.Start(b, r, filepath.Join("..", "testdata", "ruby", "shares.rb"))
	benchSamples(b, func(wrap func(func(bpf.Record) error) func(bpf.Record) error, stacks *int) (*Summary, error) {
		// The agent's defaults: unwound with tables, no stack copy.
		return Record(context.Background(), Options{PIDs: []int{cmd.Process.Pid}, Frequency: 999,
			NativeTables: true, StackSize: -1,
			Stacks:     func(merge.Stack, *Process) { *stacks++ },
			wrapHandle: wrap})
	}, true)
}

// BenchmarkRecordSample measures the same for a recording into a file (record's
// default path: native frames unwound by the program, then decode, name,
// compact, write) of bench/workload.rb at 10 and 200
// frames, the depths make bench measures the recorder's CPU at.
//
//	go test -run '^$' -bench RecordSample -benchmem ./recording
func BenchmarkRecordSample(b *testing.B) {
	testskip.Privileged(b, bpf.Supported())
	r := testruby.Get(b, "debian-3.1")
	for _, depth := range []string{"10", "200"} {
		b.Run(depth+"-frames", func(b *testing.B) {
			cmd := testruby.Start(b, r, "-e", `STDOUT.puts "ready"; STDOUT.flush; load ARGV.shift`,
				filepath.Join("..", "bench", "workload.rb"), depth, "100000000")
			out := filepath.Join(memoryDir(b), "rubyperf.data")
			benchSamples(b, func(wrap func(func(bpf.Record) error) func(bpf.Record) error, _ *int) (*Summary, error) {
				// record's defaults: unwound with tables, no stack copy.
				return Record(context.Background(), Options{PIDs: []int{cmd.Process.Pid}, Frequency: 999, Output: out,
					NativeTables: true, StackSize: -1, wrapHandle: wrap})
			}, false)
			if fi, err := os.Stat(out); err == nil {
				b.ReportMetric(float64(fi.Size())/float64(b.N), "file-B/op")
			}
		})
	}
}

// benchSamples records (through record, which passes wrap on as
// Options.wrapHandle) until benchHeldSamples samples came, then hands them
// to the recording's handler again, in turn, b.N times.
func benchSamples(b *testing.B, record func(wrap func(func(bpf.Record) error) func(bpf.Record) error, stacks *int) (*Summary, error), live bool) {
	const benchHeldSamples = 500
	var (
		held    []bpf.Record
		buf     []byte
		stacks  int
		benched bool
	)
	wrap := func(handle func(bpf.Record) error) func(bpf.Record) error {
		return func(rec bpf.Record) error {
			sample := rec.Header.Type == unix.PERF_RECORD_SAMPLE && !rec.SideBand && rec.OffCPUEnd == nil
			if sample {
				// As the program wrote it: handle names it in place, and a
				// named payload taken again would read as all frames new.
				held = append(held, bpf.Record{CPU: rec.CPU, Header: rec.Header, Data: append([]byte(nil), rec.Data...)})
			}
			if err := handle(rec); err != nil {
				return err
			}
			if !sample || len(held) < benchHeldSamples {
				return nil
			}
			stacks = 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				h := held[i%len(held)]
				// handle names the payload in place: take a fresh copy.
				buf = append(buf[:0], h.Data...)
				rec := bpf.Record{CPU: h.CPU, Header: h.Header, Data: buf}
				if err := handle(rec); err != nil {
					return err
				}
			}
			b.StopTimer()
			benched = true
			return errBenchDone
		}
	}
	_, err := record(wrap, &stacks)
	if !errors.Is(err, errBenchDone) || !benched {
		b.Fatalf("recording ended before the benchmark ran: %v", err)
	}
	if live && stacks < b.N {
		b.Fatalf("%d stacks handed on for %d samples", stacks, b.N)
	}
}

// memoryDir is a temporary directory in memory (/dev/shm) where there is
// one, else on disk: the benchmark writes hundreds of megabytes in seconds,
// and a disk's writeback throttling would be what it measured.
func memoryDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "rubyperf-bench-")
	if err != nil {
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
