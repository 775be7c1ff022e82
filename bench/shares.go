package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// shares is how rubyperf's and stackprof's shares of time per method
// compare, measured in the same process of bench/app.rb: the top methods
// by stackprof's self time, and rubyperf's samples with a frame without a
// name.
type shares struct {
	seconds              float64
	rubyperfSamples      int // in StackProf.run's block, not in GC
	stackprofSamples     int // not in GC
	top                  []shareRow
	maxSelf, maxTotal    float64 // percentage points
	notNamed, allSamples int     // rubyperf's samples with a frame without a name, and all
}

type shareRow struct {
	name             string
	rpSelf, spSelf   float64 // %
	rpTotal, spTotal float64
	dSelf, dTotal    float64 // percentage points
}

// sharesTop is how many methods are compared.
const sharesTop = 20

var notNamedRe = regexp.MustCompile(`(\d+) of (\d+) samples \([0-9.]+%\) have Ruby frames without a name`)

// compareShares runs bench/app.rb under rubyperf record, with stackprof
// running in it, and compares the two.
func (b *bench) compareShares() (*shares, error) {
	s := &shares{seconds: 20}
	if b.quick {
		s.seconds = 3
	}
	app := filepath.Join(b.repo, "bench", "app.rb")
	spReport := filepath.Join(b.tmp, "stackprof.json")
	data := filepath.Join(b.tmp, "shares.data")
	res, err := run(nil, b.rubyperf, "record", "-F", "499", "-o", data, "--", b.ruby, app,
		strconv.FormatFloat(s.seconds, 'f', -1, 64), spReport, "1000")
	if err != nil {
		return nil, fmt.Errorf("shares: record: %w", err)
	}
	if m := notNamedRe.FindStringSubmatch(res.stderr); m != nil {
		s.notNamed, _ = strconv.Atoi(m[1])
		s.allSamples, _ = strconv.Atoi(m[2])
	} else if m := regexp.MustCompile(`rubyperf: (\d+) samples`).FindStringSubmatch(res.stderr); m != nil {
		s.allSamples, _ = strconv.Atoi(m[1])
	}
	folded := filepath.Join(b.tmp, "shares.folded")
	if _, err := run(nil, b.rubyperf, "convert", "-i", data, "-f", "folded", "--ruby-only", "-o", folded); err != nil {
		return nil, fmt.Errorf("shares: convert: %w", err)
	}
	rpSelf, rpTotal, n, err := foldedShares(folded)
	if err != nil {
		return nil, err
	}
	s.rubyperfSamples = n
	spSelf, spTotal, m, err := stackprofShares(spReport)
	if err != nil {
		return nil, err
	}
	s.stackprofSamples = m
	names := make([]string, 0, len(spSelf))
	for name := range spSelf {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		return spSelf[names[i]] > spSelf[names[j]] || spSelf[names[i]] == spSelf[names[j]] && names[i] < names[j]
	})
	if len(names) > sharesTop {
		names = names[:sharesTop]
	}
	for _, name := range names {
		r := shareRow{name: name, rpSelf: rpSelf[name], spSelf: spSelf[name], rpTotal: rpTotal[name], spTotal: spTotal[name]}
		r.dSelf, r.dTotal = abs(r.rpSelf-r.spSelf), abs(r.rpTotal-r.spTotal)
		s.maxSelf, s.maxTotal = max(s.maxSelf, r.dSelf), max(s.maxTotal, r.dTotal)
		s.top = append(s.top, r)
	}
	b.logf("shares: %d rubyperf samples, %d stackprof samples; top %d within %.2f pp (self), %.2f pp (total)",
		s.rubyperfSamples, s.stackprofSamples, len(s.top), s.maxSelf, s.maxTotal)
	return s, nil
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// foldedShares reads rubyperf's Ruby-only folded stacks of a recording at
// 499 Hz: each method's share of the samples taken in StackProf.run's block
// and not in GC, as the leaf (self) and anywhere in the stack (total).
func foldedShares(path string) (self, total map[string]float64, samples int, err error) {
	const period = 1e9 / 499
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, 0, err
	}
	defer f.Close()
	self, total = map[string]float64{}, map[string]float64{}
	var weight float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, nil, 0, fmt.Errorf("%s: folded line %q", path, line)
		}
		w, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%s: folded line %q", path, line)
		}
		frames := strings.Split(line[:i], ";")
		if !contains(frames, "StackProf.run") || contains(frames, "(garbage collection)") {
			continue // outside stackprof's window, or in GC (stackprof counts that apart)
		}
		samples += int(w/period + 0.5) // folded stacks weigh samples by their period (ns)
		weight += w
		self[frames[len(frames)-1]] += w
		seen := map[string]bool{}
		for _, fr := range frames {
			if !seen[fr] {
				seen[fr] = true
				total[fr] += w
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, 0, err
	}
	for k := range self {
		self[k] *= 100 / weight
	}
	for k := range total {
		total[k] *= 100 / weight
	}
	return self, total, samples, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// stackprofShares reads app.rb's report of stackprof's result: each
// method's share of its samples not in GC, self and total, by name (a
// name can have several frames: blocks, methods of one name).
func stackprofShares(path string) (self, total map[string]float64, samples int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, 0, err
	}
	var r struct {
		Samples   int `json:"samples"`
		GCSamples int `json:"gc_samples"`
		Frames    []struct {
			Name        string `json:"name"`
			Self, Total int
		} `json:"frames"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	n := r.Samples - r.GCSamples
	if n <= 0 {
		return nil, nil, 0, fmt.Errorf("%s: no samples outside GC", path)
	}
	self, total = map[string]float64{}, map[string]float64{}
	for _, f := range r.Frames {
		if strings.HasPrefix(f.Name, "(") {
			continue // (garbage collection), (marking), (sweeping)
		}
		self[f.Name] += 100 * float64(f.Self) / float64(n)
		total[f.Name] += 100 * float64(f.Total) / float64(n)
	}
	return self, total, n, nil
}

// String is the comparison as docs/performance.md shows it.
func (s *shares) String() string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format+"\n", args...) }
	p("**Shares against stackprof, in the same process** (`bench/app.rb`: a recursive descent parser 50-80 frames deep,")
	p("ERB templates compiled once and one from source now and then, JSON, Digest and Zlib, files required while it runs;")
	p("%.0f CPU-seconds, stackprof in it at a 1 ms interval, `rubyperf record -F 499` on it; samples in GC left out on", s.seconds)
	p("both sides, as stackprof counts them apart). rubyperf: %d samples; stackprof: %d. rubyperf's samples with a", s.rubyperfSamples, s.stackprofSamples)
	p("Ruby frame without a name: %d of %d (%.2f%%). The top %d methods by stackprof's self time differ by at most", s.notNamed, s.allSamples,
		100*float64(s.notNamed)/float64(max(s.allSamples, 1)), len(s.top))
	p("%.2f pp (self) and %.2f pp (total):", s.maxSelf, s.maxTotal)
	p("")
	p("| method | self: rubyperf | stackprof | total: rubyperf | stackprof |")
	p("|---|---|---|---|---|")
	for _, r := range s.top {
		p("| `%s` | %.2f%% | %.2f%% | %.2f%% | %.2f%% |", r.name, r.rpSelf, r.spSelf, r.rpTotal, r.spTotal)
	}
	return w.String()
}
