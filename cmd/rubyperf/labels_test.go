package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/internal/profilerstate"
	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/recording"
)

// labelsWorkload is what testdata/ruby/labels.rb prints.
type labelsWorkload struct {
	EndpointCPU  map[string]float64 `json:"endpoint_cpu"`
	UnlabeledCPU float64            `json:"unlabeled_cpu"`
	Requests     map[string]struct {
		Endpoint string  `json:"endpoint"`
		CPU      float64 `json:"cpu"`
	} `json:"requests"`
}

// TestRequestLabels: requests served on fibers taking turns (by hand, and
// under a Fiber scheduler), each labelled
// request_id and endpoint through an extension that publishes them as the
// ruby-profiler gem does (testdata/ruby/profiler_state_ext). Every sample
// of a labelled fiber carries its labels, named; each endpoint's share of
// the samples is its share of the CPU the workload measured; every
// request_id a sample names is one the workload served on that endpoint;
// pprof carries them as labels, folded --group-by splits by them.
func TestRequestLabels(t *testing.T) {
	testskip.Privileged(t, bpf.Supported())
	// The DWARF Rubies, a stripped one (a built-in table; dynamic
	// Symbols named through what rb_sym2id's code says), and a musl one
	// (the extension's thread-local state found through musl's DTV).
	type labelRun struct {
		r    testruby.Ruby
		mode string // "" fibers taking turns by hand; "scheduler" under a Fiber scheduler
	}
	var runs []labelRun
	for _, r := range append(testruby.WithDWARF(t), testruby.Get(t, "source-3.3-static-stripped"), testruby.Get(t, "source-3.3-musl")) {
		runs = append(runs, labelRun{r, ""})
	}
	runs = append(runs, labelRun{testruby.Get(t, "source-3.3-static"), "scheduler"})
	for _, rn := range runs {
		r := rn.r
		t.Run(strings.TrimSuffix(r.Name+"-"+rn.mode, "-"), func(t *testing.T) {
			so := profilerstate.Build(t, r)
			dir := t.TempDir()
			file := filepath.Join(dir, "rubyperf.data")
			out := filepath.Join(dir, "out.json")
			cmd := []string{"sh", "-c", "exec \"$0\" \"$1\" 4 \"$2\" $4 > \"$3\"", r.Exe, profilerstate.WorkloadPath(t), so, out, rn.mode}
			if _, err := recording.Record(context.Background(), recording.Options{
				Command: cmd, Frequency: 499, Duration: 20 * time.Second, Output: file}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil || len(b) == 0 {
				t.Fatalf("the workload printed nothing: %v", err)
			}
			var w labelsWorkload
			if err := json.Unmarshal(b, &w); err != nil {
				t.Fatalf("%v in %q", err, b)
			}
			endpoint := map[string]uint64{}
			var labelled, all uint64
			wrongRequest := 0
			if _, err := readback.ReadStacks(file, readback.ReadOptions{}, func(s merge.Stack) error {
				inEndpoint := ""
				for _, f := range s.Frames {
					if strings.HasPrefix(f.Name, "Endpoints.") {
						inEndpoint = strings.TrimPrefix(f.Name, "Endpoints.")
					}
				}
				if inEndpoint == "" {
					return nil // the scheduler, start-up: not a request's
				}
				all += s.Period
				ep, id := s.LabelValue("endpoint"), s.LabelValue("request_id")
				if ep == merge.NoLabel {
					return nil
				}
				labelled += s.Period
				endpoint[ep] += s.Period
				if ep != inEndpoint || w.Requests[id].Endpoint != ep {
					wrongRequest++
					if wrongRequest < 5 {
						t.Errorf("a sample in Endpoints.%s labelled endpoint=%s request_id=%s (served on %q)", inEndpoint, ep, id, w.Requests[id].Endpoint)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if all == 0 || float64(labelled) < 0.98*float64(all) {
				t.Fatalf("%d of %d ns in Endpoints methods carry labels", labelled, all)
			}
			var cpu float64
			for _, v := range w.EndpointCPU {
				cpu += v
			}
			for ep, v := range w.EndpointCPU {
				got, want := float64(endpoint[ep])/float64(labelled), v/cpu
				t.Logf("endpoint=%s: %.1f%% of the labelled samples, %.1f%% of the CPU measured", ep, 100*got, 100*want)
				if !near(got, want, 0.05) {
					t.Errorf("endpoint=%s: %.3f of the samples, the workload measured %.3f", ep, got, want)
				}
			}

			// pprof: the labels of each sample.
			pb := filepath.Join(dir, "p.pb.gz")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"convert", "-i", file, "-f", "pprof", "-o", pb}, &stdout, &stderr); code != 0 {
				t.Fatalf("convert: %s", stderr.String())
			}
			f, err := os.Open(pb)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p, err := profile.Parse(f)
			if err != nil {
				t.Fatal(err)
			}
			byLabel := map[string]int64{}
			for _, s := range p.Sample {
				if v := s.Label["endpoint"]; len(v) == 1 {
					byLabel[v[0]] += s.Value[len(s.Value)-1]
				}
			}
			for ep := range w.EndpointCPU {
				if byLabel[ep] == 0 {
					t.Errorf("pprof: no sample labelled endpoint=%s (%v)", ep, byLabel)
				}
			}

			// folded --group-by: each line under "endpoint=..." after its thread.
			stdout.Reset()
			if code := run([]string{"convert", "-i", file, "-f", "folded", "--group-by", "endpoint"}, &stdout, &stderr); code != 0 {
				t.Fatalf("convert --group-by: %s", stderr.String())
			}
			groups := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
				frames := strings.Split(line, ";")
				if len(frames) > 1 && strings.HasPrefix(frames[1], "endpoint=") {
					groups[frames[1]] = true
				}
			}
			for _, g := range []string{"endpoint=users", "endpoint=orders", "endpoint=search", "endpoint=" + merge.NoLabel} {
				if !groups[g] {
					t.Errorf("folded --group-by endpoint: no stack under %s (%v)", g, groups)
				}
			}
		})
	}
}
