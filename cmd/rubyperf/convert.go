package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/outfile"
	"github.com/rubyperf/rubyperf/readback"
)

// convertDefaults are the output file of each format ("-" is stdout).
var convertDefaults = map[string]string{
	"folded": "-", "pprof": "rubyperf.pb.gz", "speedscope": "rubyperf.speedscope.json", "svg": "rubyperf.svg",
}

// viewSubtitle says under a flame graph's title what its view shows.
var viewSubtitle = map[merge.View]string{
	merge.ViewRuby:     "Ruby frames, C methods and their native code, kernel (--native: every native frame)",
	merge.ViewNative:   "Ruby frames and every native frame (--native)",
	merge.ViewRubyOnly: "Ruby frames and C methods only (--ruby-only)",
}

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	in := addInputFlags(fs)
	format := fs.String("f", "", "folded, pprof, speedscope or svg")
	out := fs.String("o", "", "output file, - for stdout (default: stdout for folded, rubyperf.pb.gz, rubyperf.speedscope.json, rubyperf.svg)")
	groupBy := fs.String("group-by", "", "put each stack under a frame naming its request label KEY (\"KEY=value\"): folded, svg, speedscope")
	if err := in.parse(fs, args); err != nil {
		return err
	}
	if *format == "" {
		return usageError{"-f is required: the format to write, one of " + strings.Join(slices.Sorted(maps.Keys(convertDefaults)), ", ")}
	}
	if err := oneOf("-f", *format, slices.Sorted(maps.Keys(convertDefaults))...); err != nil {
		return err
	}
	def := convertDefaults[*format]
	if *groupBy != "" && *format == "pprof" {
		return usageError{"--group-by: pprof samples carry every label already (go tool pprof -tagroot KEY)"}
	}
	if *out == "" {
		*out = def
	}
	if *out != "-" {
		if err := outfile.Check(*out); err != nil {
			return err // before reading the recording, not after
		}
	}
	// No format holds the recording's stacks: a recording of any length
	// converts in memory bounded by its distinct stacks (speedscope adds a
	// few bytes per sample, as its file lists every sample).
	var pw export.Builder
	var pprof *export.Pprof
	var graph *export.FlameGraph
	switch *format {
	case "folded":
		pw = export.NewFolded(export.FoldedOptions{})
	case "pprof":
		pprof = export.NewPprof(export.PprofOptions{})
		pw = pprof
	case "speedscope":
		pw = export.NewSpeedscope(export.SpeedscopeOptions{Name: *in.input})
	case "svg":
		graph = export.NewFlameGraph(export.SVGOptions{Title: "rubyperf: " + *in.input})
		pw = graph
	}
	stats, err := readback.ReadStacks(*in.input, in.readOptions(stderr), func(s merge.Stack) error {
		if !in.keep(&s) {
			return nil
		}
		if pprof != nil && pprof.Options.Period == 0 && !s.Alloc {
			pprof.Options.Period = int64(s.Period) // the first sample's
		}
		if *groupBy != "" {
			merge.GroupBy(&s, *groupBy)
		}
		if pprof == nil { // pprof has both objects and bytes
			in.weigh(&s)
		}
		pw.Add(&s)
		return nil
	})
	if err == nil {
		err = in.checkLive(stats)
	}
	if err != nil {
		return err
	}
	if pprof != nil {
		pprof.Options.Live = stats.Live != nil
	}
	if pprof != nil && !stats.Start.IsZero() {
		pprof.Options.TimeNanos = stats.Start.UnixNano()
	}
	unit, weighed := export.UnitNanoseconds, ""
	if stats.Kind == readback.KindAlloc {
		unit, weighed = export.UnitObjects, "; weighed by objects allocated"
		if *in.weight == "bytes" {
			unit, weighed = export.UnitBytes, "; weighed by bytes allocated"
		}
	}
	if sp, ok := pw.(*export.Speedscope); ok {
		sp.Options.Unit = unit
	}
	if graph != nil {
		graph.Options.Unit = unit
		graph.Options.Subtitle = fmt.Sprintf("%d samples%s; %s", graph.Samples(), weighed, viewSubtitle[in.view()])
		if stats.Incomplete > 0 {
			graph.Options.Subtitle += fmt.Sprintf("; %d under %s", stats.Incomplete, merge.IncompleteName)
		}
	}

	if *out == "-" {
		return pw.Write(stdout)
	}
	f, err := outfile.Create(*out, 0o644)
	if err != nil {
		return err
	}
	if err := pw.Write(f); err != nil {
		f.Abort()
		return fmt.Errorf("%s: %w", *out, err)
	}
	return f.Commit()
}
