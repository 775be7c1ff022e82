package recording

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
)

// recordWorkload records the bundled workload for d and returns the file.
func recordWorkload(t *testing.T, ruby string, d time.Duration) string {
	t.Helper()
	return recordScript(t, ruby, "workload.rb", d, Options{})
}

// recordScript records testdata/ruby's script for d with opts (its
// command, rate, duration and output set here) and returns the file.
func recordScript(t *testing.T, ruby, script string, d time.Duration, opts Options) string {
	t.Helper()
	testskip.Privileged(t, bpf.Supported())
	r := testruby.Get(t, ruby)
	path, _ := filepath.Abs(filepath.Join("../testdata/ruby", script))
	opts.Output = filepath.Join(t.TempDir(), "rubyperf.data")
	opts.Command, opts.Frequency, opts.Duration = []string{r.Exe, path, "30"}, 199, d
	if _, err := Record(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	return opts.Output
}

// perfUserFrames runs stock perf script (DWARF unwinding of the same stack
// copies) and returns each sample's user frames as "dso+relative address",
// keyed by sampleKey. perf script prints samples in time order, which is not
// the file's order when several CPUs' buffers interleave, so samples are
// matched by thread and time, never by position.
func perfUserFrames(t *testing.T, file string) map[string][]string {
	t.Helper()
	out, err := exec.Command("perf", "script", "--no-inline", "--ns", "-F", "tid,time,ip,dso", "-i", file).Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	all := map[string][]string{}
	key := ""
	var cur []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasPrefix(line, "\t") && len(f) == 2 {
			// a sample's header, "tid sec.nsec:" (its frames are indented by a tab)
			if key != "" {
				all[key] = cur
			}
			tid, _ := strconv.Atoi(f[0])
			sec, nsec, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), ".")
			s, _ := strconv.ParseUint(sec, 10, 64)
			ns, _ := strconv.ParseUint(nsec, 10, 64)
			key, cur = sampleKey(tid, s*1e9+ns), []string{}
			continue
		}
		if len(f) < 2 || strings.HasPrefix(f[0], "ffffffff") {
			continue // kernel frames and perf's end marker
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		cur = append(cur, fmt.Sprintf("%#x", addr)) // the object may print as "(inlined)": compare addresses
	}
	if key != "" {
		all[key] = cur
	}
	return all
}

func sampleKey(tid int, ns uint64) string { return fmt.Sprintf("%d/%d", tid, ns) }

// TestNativeFramesMatchPerf: for at least 99% of the workload's samples on
// Debian's ruby3.1, the native frames rubyperf unwinds are the ones stock
// perf unwinds from the same file. Where perf's unwinding stops early,
// rubyperf may go on: those frames are counted, not held against it.
// Unwound here from the stack copy (the workload's stacks are shallow),
// and by the program with its tables (a 64 KiB copy of a deep block-heavy
// stack beside them, for perf).
func TestNativeFramesMatchPerf(t *testing.T) {
	t.Run("copy", func(t *testing.T) {
		nativeFramesMatchPerf(t, recordWorkload(t, "debian-3.1", 5*time.Second), false)
	})
	t.Run("tables", func(t *testing.T) {
		nativeFramesMatchPerf(t, recordScript(t, "debian-3.1", "nativedeep.rb", 3*time.Second,
			Options{NativeTables: true, StackSize: bpf.MaxStackSize}), true)
	})
}

// nativeFramesMatchPerf compares the native frames rubyperf reads from
// file with those perf script unwinds from its stack copies; tables: most
// of rubyperf's come from the program's unwinding.
func nativeFramesMatchPerf(t *testing.T, file string, tables bool) {
	ours := map[string][]string{}
	stats, err := readback.ReadStacks(file, readback.ReadOptions{NativeOnly: true}, func(s merge.Stack) error {
		fs := []string{}
		for _, f := range s.Frames {
			if f.Kind == merge.KindNative {
				fs = append(fs, fmt.Sprintf("%#x", f.Addr-f.MapStart+f.MapOffset))
			}
		}
		ours[sampleKey(s.TID, s.Time)] = fs
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if unwound := stats.TableUnwound; tables != (unwound > stats.Samples*9/10) {
		t.Fatalf("%d of %d samples unwound by the program", unwound, stats.Samples)
	}
	theirs := perfUserFrames(t, file)
	if len(theirs) < 200 {
		t.Fatalf("perf script shows only %d samples", len(theirs))
	}
	same, deeper, shown, missing := 0, 0, 0, 0
	for k, th := range theirs {
		o, ok := ours[k]
		if !ok {
			missing++
			if shown < 3 {
				shown++
				t.Logf("sample %s: perf script shows it, rubyperf does not", k)
			}
			continue
		}
		// perf lists the user leaf twice when the sample interrupted a
		// system call (once from the user registers, once unwound).
		if len(th) > 1 && th[0] == th[1] && (len(o) < 2 || o[0] != o[1]) {
			th = th[1:]
		}
		a, b := strings.Join(o, "\n"), strings.Join(th, "\n")
		if a == b || strings.HasPrefix(a, b+"\n") && len(th) > 0 {
			same++
			if a != b {
				deeper++
			}
		} else if shown < 3 {
			shown++
			t.Logf("sample %s differs:\nrubyperf:\n%s\nperf:\n%s", k, a, b)
		}
	}
	if missing > 0 {
		t.Errorf("%d of perf script's %d samples are missing from rubyperf's reading", missing, len(theirs))
	}
	if extra := len(ours) - (len(theirs) - missing); extra > len(theirs)/100 {
		t.Errorf("rubyperf reads %d samples perf script does not show", extra)
	}
	frac := float64(same) / float64(len(theirs))
	t.Logf("%d of %d samples (%.2f%%) have the native frames perf script shows (%d go deeper than perf)",
		same, len(theirs), 100*frac, deeper)
	if frac < 0.99 {
		t.Errorf("only %.2f%% of samples agree with perf", 100*frac)
	}
}
