package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// perfEvent is one event's part of perf report --stdio: its samples,
// its event count, and the lines after.
type perfEvent struct {
	samples string
	count   int64
	text    string
}

var (
	perfSamplesLine = regexp.MustCompile(`(?m)^# Samples: (\S+)\s+of event '([^']+)'$`)
	perfCountLine   = regexp.MustCompile(`(?m)^# Event count \(approx\.\): (\d+)$`)
)

// perfReportEvents splits perf report --stdio's output by event.
func perfReportEvents(out string) map[string]perfEvent {
	events := map[string]perfEvent{}
	idx := perfSamplesLine.FindAllStringSubmatchIndex(out, -1)
	for i, m := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		part := out[m[1]:end]
		e := perfEvent{samples: out[m[2]:m[3]], text: part}
		if c := perfCountLine.FindStringSubmatch(part); c != nil {
			e.count, _ = strconv.ParseInt(c[1], 10, 64)
		}
		events[out[m[4]:m[5]]] = e
	}
	return events
}

// TestInjectAlloc: a recording of allocations beside CPU samples
// (record --alloc -F 99) injected for stock perf has two events: perf
// report shows ruby-cpu and ruby-alloc apart, the allocation event's count
// is the objects rubyperf estimated, and its top allocating methods are
// named through /tmp/perf-PID.map; perf script and perf inject read it.
func TestInjectAlloc(t *testing.T) {
	testskip.Command(t, "perf", "linux-perf")
	r := testruby.Get(t, "debian-3.3")
	script, _ := filepath.Abs("../../testdata/ruby/alloc.rb")
	dir := t.TempDir()
	cmd := testruby.Start(t, r, script, "10", filepath.Join(dir, "counts.json"))
	pid := cmd.Process.Pid
	data := filepath.Join(dir, "alloc.data")
	recordOutput(t, "--alloc", "-F", "99", "-p", strconv.Itoa(pid), "-d", "3", "-o", data)
	objects, _ := profileTotals(allocProfile(t, data, "--weight", "objects"))

	mapFile := fmt.Sprintf("/tmp/perf-%d.map", pid)
	t.Cleanup(func() { os.Remove(mapFile) })
	injected := filepath.Join(dir, "injected.data")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"inject", "-i", data, "-o", injected}, &stdout, &stderr); code != 0 {
		t.Fatalf("inject: exit %d: %s", code, stderr.String())
	}
	rep, err := exec.Command("perf", "report", "--stdio", "--children", "--sort", "sym", "-g", "none", "-i", injected).CombinedOutput()
	if err != nil {
		t.Fatalf("perf report: %v\n%s", err, rep)
	}
	events := perfReportEvents(string(rep))
	cpu, okCPU := events["ruby-cpu"]
	alloc, okAlloc := events["ruby-alloc"]
	if !okCPU || !okAlloc {
		t.Fatalf("perf report shows events %v, want ruby-cpu and ruby-alloc\n%s", slices.Sorted(maps.Keys(events)), lastLines(string(rep), 30))
	}
	t.Logf("ruby-cpu: %s samples, count %d; ruby-alloc: %s samples, count %d (rubyperf: %d objects)",
		cpu.samples, cpu.count, alloc.samples, alloc.count, objects)
	if d := float64(alloc.count-objects) / float64(objects); d > 0.001 || d < -0.001 {
		t.Errorf("ruby-alloc counts %d objects, rubyperf %d", alloc.count, objects)
	}
	for _, m := range []string{"Alloc#objects", "Alloc#arrays", "Alloc#strings"} {
		if !strings.Contains(alloc.text, m) {
			t.Errorf("perf report's ruby-alloc event does not list %s", m)
		}
	}
	if !strings.Contains(cpu.text, "Alloc#") {
		t.Errorf("perf report's ruby-cpu event lists none of the workload's methods")
	}
	scr, err := exec.Command("perf", "script", "-F", "event,ip,sym", "-i", injected).Output()
	if err != nil || !strings.Contains(string(scr), "ruby-alloc") || !strings.Contains(string(scr), "Alloc#objects") {
		t.Errorf("perf script of the injected file names no ruby-alloc sample of Alloc#objects: %v", err)
	}
	again := filepath.Join(dir, "again.data")
	if out, err := exec.Command("perf", "inject", "-i", injected, "-o", again).CombinedOutput(); err != nil {
		t.Errorf("perf inject of the injected file: %v\n%s", err, out)
	} else if rep2, err := exec.Command("perf", "report", "--stdio", "--sort", "sym", "-g", "none", "-i", again).CombinedOutput(); err != nil ||
		perfReportEvents(string(rep2))["ruby-alloc"].count != alloc.count {
		t.Errorf("perf report after perf inject: ruby-alloc count %d, want %d (%v)", perfReportEvents(string(rep2))["ruby-alloc"].count, alloc.count, err)
	}
}
