package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rubyperf/rubyperf/export"
)

// convertDefaults are the output file of each format ("-" is stdout).
var convertDefaults = map[string]string{
	"folded": "-", "pprof": "rubyperf.pb.gz", "speedscope": "rubyperf.speedscope.json", "svg": "rubyperf.svg",
}

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	in := addInputFlags(fs)
	format := fs.String("f", "", "folded, pprof, speedscope or svg")
	out := fs.String("o", "", "output file, - for stdout (default: stdout for folded, rubyperf.pb.gz, rubyperf.speedscope.json, rubyperf.svg)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	def, ok := convertDefaults[*format]
	if !ok {
		return usageError{fmt.Sprintf("-f %q must be one of: folded, pprof, speedscope, svg", *format)}
	}
	if *out == "" {
		*out = def
	}
	stacks, _, err := in.stacks(stderr)
	if err != nil {
		return err
	}
	w, closeOut := stdout, func() error { return nil }
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		w, closeOut = f, f.Close
	}
	switch *format {
	case "folded":
		err = export.WriteFolded(w, stacks, export.FoldedOptions{})
	case "pprof":
		var period int64
		if len(stacks) > 0 {
			period = int64(stacks[0].Period)
		}
		err = export.WritePprof(w, stacks, export.PprofOptions{Period: period})
	case "speedscope":
		err = export.WriteSpeedscope(w, stacks, export.SpeedscopeOptions{Name: *in.input})
	case "svg":
		err = export.WriteFlameGraphSVG(w, stacks, export.SVGOptions{Title: "rubyperf: " + *in.input,
			Subtitle: fmt.Sprintf("%d samples; Ruby, C methods, native and kernel frames", len(stacks))})
	}
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", *out, err)
	}
	return nil
}
