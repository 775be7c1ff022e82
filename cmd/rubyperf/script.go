package main

import (
	"bufio"
	"flag"
	"io"
	"strconv"
	"strings"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/rubystack"
)

func runScript(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("script", flag.ContinueOnError)
	in := addInputFlags(fs)
	groupBy := fs.String("group-by", "", "put each stack on a frame naming its request label KEY (\"KEY=value\"), for flame graphs split by it")
	if err := in.parse(fs, args); err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	stats, err := readback.ReadStacks(*in.input, in.readOptions(stderr),
		func(s merge.Stack) error {
			if !in.keep(&s) {
				return nil
			}
			if *groupBy != "" {
				merge.GroupBy(&s, *groupBy)
			}
			return writeScriptSample(w, &s)
		})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err == nil {
		err = in.checkLive(stats)
	}
	return err
}

// writeScriptSample prints one sample as perf script's default format does:
// a header line, one frame per line, a blank line. A Ruby frame shows its
// label where perf shows a symbol, and path:line where perf shows the
// object file. It formats by hand: it runs once per frame of every sample.
//
// Names, paths and the thread's name are Printable, where perf prints
// them raw: a newline in an eval's path or a method's name would split a
// frame (stackcollapse-perf.pl would read its tail as another frame or a
// sample header), and an escape sequence would reach the terminal.
func writeScriptSample(w *bufio.Writer, s *merge.Stack) error {
	buf := w.AvailableBuffer()
	if s.Comm == "" {
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(s.TID), 10)
	} else {
		buf = export.AppendPrintable(buf, s.Comm)
	}
	buf = append(buf, ' ')
	buf = appendPadded(buf, uint64(s.TID), 10, 5, ' ')
	buf = append(buf, " ["...)
	buf = appendPadded(buf, uint64(s.CPU), 10, 3, '0')
	buf = append(buf, "] "...)
	buf = appendPadded(buf, s.Time/1e9, 10, 5, ' ')
	buf = append(buf, '.')
	buf = appendPadded(buf, s.Time%1e9/1e3, 10, 6, '0')
	buf = append(buf, ": "...)
	buf = appendPadded(buf, s.Period, 10, 10, ' ')
	buf = append(buf, " ruby-cpu: \n"...)
	for i := range s.Frames {
		f := &s.Frames[i]
		buf = append(buf, '\t')
		switch f.Kind {
		case merge.KindRuby, merge.KindCFunc:
			buf = appendPadded(buf, 0, 16, 16, ' ')
			buf = append(buf, ' ')
			buf = append(buf, scriptName(export.Printable(f.Name))...)
			buf = append(buf, " ("...)
			switch {
			case f.File == "" && f.Name == rubystack.UnknownLabel:
				// Not "<cfunc>": flame graph scripts name an unknown frame
				// after its object, and this one may be any kind of frame.
				buf = append(buf, rubystack.UnknownLabel...)
			case f.File == "":
				buf = append(buf, "<cfunc>"...)
			default:
				buf = append(buf, noSpaces(export.Printable(f.File))...)
				buf = append(buf, ':')
				buf = strconv.AppendInt(buf, f.Line, 10)
			}
		case merge.KindState, merge.KindLabel:
			buf = appendPadded(buf, 0, 16, 16, ' ')
			buf = append(buf, ' ')
			buf = append(buf, scriptName(export.Printable(f.Name))...)
			if f.Kind == merge.KindState {
				buf = append(buf, " ([state]"...)
			} else {
				buf = append(buf, " ([label]"...)
			}
		case merge.KindKernel:
			buf = appendPadded(buf, f.Addr, 16, 16, ' ')
			buf = append(buf, ' ')
			buf = appendSymOff(buf, f)
			buf = append(buf, " ([kernel.kallsyms]"...)
		default:
			if f.File == anonMapping {
				// JIT code, as perf shows it: the address itself, and the
				// perf map that would name it (written by the runtime or not).
				buf = appendPadded(buf, f.Addr, 16, 16, ' ')
				buf = append(buf, ' ')
				// No symbol names it: merge does ("[JIT] Foo#bar").
				buf = append(buf, scriptName(export.Printable(f.Name))...)
				buf = append(buf, " (/tmp/perf-"...)
				buf = strconv.AppendUint(buf, uint64(s.PID), 10)
				buf = append(buf, ".map"...)
				break
			}
			// User objects show the address within the object, as perf does.
			buf = appendPadded(buf, f.Addr-f.MapStart+f.MapOffset, 16, 16, ' ')
			buf = append(buf, ' ')
			buf = appendSymOff(buf, f)
			buf = append(buf, " ("...)
			buf = append(buf, noSpaces(export.Printable(f.File))...)
		}
		buf = append(buf, ")\n"...)
	}
	buf = append(buf, '\n')
	_, err := w.Write(buf)
	return err
}

// anonMapping is the name perf gives executable memory with no file: JIT code.
const anonMapping = "//anon"

// appendPadded appends v in base, padded on the left with pad to width.
func appendPadded(buf []byte, v uint64, base, width int, pad byte) []byte {
	var num [24]byte
	n := strconv.AppendUint(num[:0], v, base)
	for range width - len(n) {
		buf = append(buf, pad)
	}
	return append(buf, n...)
}

// appendSymOff appends a native frame's name (Printable: a symbol of a
// library a user loaded may hold any bytes), and +0xOFFSET when it is a
// symbol and the address is inside it.
func appendSymOff(buf []byte, f *merge.Frame) []byte {
	buf = export.AppendPrintable(buf, f.Name)
	if f.Name == "[unknown]" || f.SymOffset == 0 {
		return buf
	}
	buf = append(buf, "+0x"...)
	return strconv.AppendUint(buf, f.SymOffset, 16)
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
