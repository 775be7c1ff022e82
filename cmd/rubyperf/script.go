package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

func runScript(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("script", flag.ContinueOnError)
	in := addInputFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	_, err = recording.ReadStacks(*in.input, in.readOptions(stderr),
		func(s merge.Stack) error { return writeScriptSample(w, &s) })
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// writeScriptSample prints one sample as perf script's default format does:
// a header line, one frame per line, a blank line. A Ruby frame shows its
// label where perf shows a symbol, and path:line where perf shows the
// object file.
func writeScriptSample(w *bufio.Writer, s *merge.Stack) error {
	comm := s.Comm
	if comm == "" {
		comm = ":" + fmt.Sprint(s.TID)
	}
	fmt.Fprintf(w, "%s %5d [%03d] %5d.%06d: %10d ruby-cpu: \n", comm, s.TID, s.CPU,
		s.Time/1e9, s.Time%1e9/1e3, s.Period)
	for _, f := range s.Frames {
		switch f.Kind {
		case merge.KindRuby, merge.KindCFunc:
			loc := "<cfunc>"
			if f.File != "" {
				loc = fmt.Sprintf("%s:%d", f.File, f.Line)
			}
			fmt.Fprintf(w, "\t%16x %s (%s)\n", 0, scriptName(f.Name), noSpaces(loc))
		case merge.KindKernel:
			fmt.Fprintf(w, "\t%16x %s (%s)\n", f.Addr, symOff(f), "[kernel.kallsyms]")
		default:
			// User objects show the address within the object, as perf does.
			fmt.Fprintf(w, "\t%16x %s (%s)\n", f.Addr-f.MapStart+f.MapOffset, symOff(f), noSpaces(f.File))
		}
	}
	_, err := w.WriteString("\n")
	return err
}

func symOff(f merge.Frame) string {
	if f.Name == "[unknown]" || f.SymOffset == 0 {
		return f.Name
	}
	return fmt.Sprintf("%s+%#x", f.Name, f.SymOffset)
}

// scriptName keeps flame graph tools whole: stackcollapse-perf.pl cuts a
// symbol at its first '(', and Ruby labels have parentheses ("block (2
// levels) in <main>").
var scriptName = strings.NewReplacer("(", "[", ")", "]").Replace

// noSpaces keeps the object column one token, as perf's parsers expect.
func noSpaces(s string) string {
	if strings.ContainsAny(s, " \t") {
		return strings.NewReplacer(" ", "_", "\t", "_").Replace(s)
	}
	return s
}
