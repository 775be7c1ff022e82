package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rubyperf/rubyperf/rubybuild"
	"github.com/rubyperf/rubyperf/rubystack"
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
		pid:       pidFlag(fs, "p", "pid of a running Ruby"),
		format:    fs.String("format", formats[0], strings.Join(formats[:last], ", ")+" or "+formats[last]),
		debugFile: fs.String("debug-file", "", "separate debug file with DWARF for the Ruby binary"),
		formats:   formats,
	}
}

// pidValue is a flag holding one process id.
type pidValue int

func (p *pidValue) String() string { return strconv.Itoa(int(*p)) }

func (p *pidValue) Set(s string) error {
	n, err := parsePid(s)
	*p = pidValue(n)
	return err
}

// parsePid reads one process id.
func parsePid(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a pid (a process id: a positive number)", s)
	}
	return n, nil
}

// pidsValue is a flag holding process ids, comma-separated.
type pidsValue []int

func (p *pidsValue) String() string {
	ids := make([]string, len(*p))
	for i, n := range *p {
		ids[i] = strconv.Itoa(n)
	}
	return strings.Join(ids, ",")
}

func (p *pidsValue) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		n, err := parsePid(f)
		if err != nil {
			return err
		}
		*p = append(*p, n)
	}
	return nil
}

// pidsFlag defines a flag holding process ids, comma-separated.
func pidsFlag(fs *flag.FlagSet, name, usage string) *[]int {
	var p []int
	fs.Var((*pidsValue)(&p), name, usage)
	return &p
}

// checkFrequency refuses a sampling rate -F cannot have.
func checkFrequency(freq int) error {
	if freq <= 0 || freq > 100000 {
		return usageError{fmt.Sprintf("-F %d: between 1 and 100000", freq)}
	}
	return nil
}

// pidFlag defines a flag holding one process id.
func pidFlag(fs *flag.FlagSet, name, usage string) *int {
	var p int
	fs.Var((*pidValue)(&p), name, usage)
	return &p
}

// checkFormat refuses a --format that is none of the command's.
func (f rubyTargetFlags) checkFormat() error {
	return oneOf("--format", *f.format, f.formats...)
}

// openReader opens the live process -p names and a reader of its Ruby VM,
// checked against the process; release closes both.
func (f rubyTargetFlags) openReader(stderr io.Writer) (r *rubystack.Reader, release func(), err error) {
	pid := *f.pid
	proc, err := rubystack.OpenProcess(pid, rubybuild.OpenOptions{DebugFile: *f.debugFile, Debuginfo: newFinder(stderr, nil)})
	if err != nil {
		return nil, nil, err
	}
	mem := &rubystack.ProcessMemory{PID: pid}
	release = func() { mem.Close(); proc.Close() }
	if r, err = rubystack.NewReaderFor(proc, mem, rubybuild.UseSnapshot); err != nil {
		release()
		return nil, nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return r, release, nil
}
