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
	"github.com/rubyperf/rubyperf/merge"
)

// recordWorkload records the bundled workload for d and returns the file.
func recordWorkload(t *testing.T, ruby string, d time.Duration) string {
	t.Helper()
	testruby.Privileged(t, bpf.Supported())
	r := testruby.Get(t, ruby)
	script, _ := filepath.Abs("../testdata/ruby/workload.rb")
	out := filepath.Join(t.TempDir(), "rubyperf.data")
	if _, err := Record(context.Background(), Options{Command: []string{r.Exe, script, "30"}, Frequency: 199,
		Duration: d, Output: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

// perfUserFrames runs stock perf script (DWARF unwinding of the same stack
// copies) and returns each sample's user frames as "dso+relative address".
func perfUserFrames(t *testing.T, file string) [][]string {
	t.Helper()
	out, err := exec.Command("perf", "script", "-F", "ip,dso", "-i", file).Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	var all [][]string
	var cur []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			if cur != nil {
				all = append(all, cur)
			}
			cur = nil
			continue
		}
		if len(f) < 2 || strings.HasPrefix(f[0], "ffffffff") {
			if cur == nil {
				cur = []string{} // a sample with kernel frames only so far
			}
			continue // kernel frames and perf's end marker
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			continue
		}
		cur = append(cur, fmt.Sprintf("%#x", addr)) // the object may print as "(inlined)": compare addresses
	}
	if cur != nil {
		all = append(all, cur)
	}
	return all
}

// TestNativeFramesMatchPerf: for at least 99% of the workload's samples on
// Debian's ruby3.1, the native frames rubyperf unwinds are the ones stock
// perf unwinds from the same file. Where perf's unwinding stops early,
// rubyperf may go on: those frames are counted, not held against it.
func TestNativeFramesMatchPerf(t *testing.T) {
	file := recordWorkload(t, "debian-3.1", 3*time.Second)
	var ours [][]string
	_, err := ReadStacks(file, ReadOptions{NativeOnly: true}, func(s merge.Stack) error {
		var fs []string
		for _, f := range s.Frames {
			if f.Kind == merge.KindNative {
				fs = append(fs, fmt.Sprintf("%#x", f.Addr-f.MapStart+f.MapOffset))
			}
		}
		ours = append(ours, fs)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	theirs := perfUserFrames(t, file)
	if len(ours) != len(theirs) || len(ours) < 200 {
		t.Fatalf("%d samples read, perf script shows %d", len(ours), len(theirs))
	}
	same, deeper, shown := 0, 0, 0
	for i := range ours {
		// perf lists the user leaf twice when the sample interrupted a
		// system call (once from the user registers, once unwound).
		if th := theirs[i]; len(th) > 1 && th[0] == th[1] && (len(ours[i]) < 2 || ours[i][0] != ours[i][1]) {
			theirs[i] = th[1:]
		}
		a, b := strings.Join(ours[i], "\n"), strings.Join(theirs[i], "\n")
		if a == b || strings.HasPrefix(a, b+"\n") && len(theirs[i]) > 0 {
			same++
			if a != b {
				deeper++
			}
		} else if shown < 3 {
			shown++
			t.Logf("sample %d differs:\nrubyperf:\n%s\nperf:\n%s", i, a, b)
		}
	}
	frac := float64(same) / float64(len(ours))
	t.Logf("%d of %d samples (%.2f%%) have the native frames perf script shows (%d go deeper than perf)",
		same, len(ours), 100*frac, deeper)
	if frac < 0.99 {
		t.Errorf("only %.2f%% of samples agree with perf", 100*frac)
	}
}

// TestReadStockPerfCallchain: a file stock perf recorded with -g (no stack
// copies) gives native stacks from its callchains.
func TestReadStockPerfCallchain(t *testing.T) {
	named := 0
	st, err := ReadStacks("../perfdata/testdata/perf-fp.data", ReadOptions{}, func(s merge.Stack) error {
		for _, f := range s.Frames {
			if f.Kind == merge.KindNative && f.Name != "[unknown]" {
				named++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples == 0 || named == 0 || st.NoPayload != st.Samples {
		t.Errorf("%+v samples, %d named native frames", st, named)
	}
}
