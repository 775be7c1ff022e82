package main

import (
	"flag"
	"strings"
)

// rubyTargetFlags are the flags of the commands that read one Ruby build
// or live process rather than a recording (offsets, snapshot): -p PID,
// --format and --debug-file.
type rubyTargetFlags struct {
	pid       *int
	format    *string
	debugFile *string
	formats   []string
}

// addRubyTargetFlags adds them to fs; formats are --format's values, the
// first its default.
func addRubyTargetFlags(fs *flag.FlagSet, formats ...string) rubyTargetFlags {
	last := len(formats) - 1
	return rubyTargetFlags{
		pid:       fs.Int("p", 0, "pid of a running Ruby"),
		format:    fs.String("format", formats[0], strings.Join(formats[:last], ", ")+" or "+formats[last]),
		debugFile: fs.String("debug-file", "", "separate debug file with DWARF for the Ruby binary"),
		formats:   formats,
	}
}

// checkFormat refuses a --format that is none of the command's.
func (f rubyTargetFlags) checkFormat() error {
	return oneOf("--format", *f.format, f.formats...)
}
