package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/rubyperf/rubyperf/export"
)

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type command struct {
	name, args, summary string
	run                 func(args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"record", "[-p PID[,PID..] | -a | -- CMD ARGS..] [--follow-forks] [--wall] [--alloc[=N] [--live]] [-F HZ] [-d DURATION] [-o FILE] " +
		"[--unwind tables|copy|both] [--stack-size BYTES] [--memory-budget SIZE] [--debug-file FILE]",
		"sample Ruby and native stacks into a perf.data", runRecord},
	{"top", "(-p PID[,PID..] | -a) [-F HZ] [--interval 1s] [-d DURATION] [-n ROWS] [--unwind tables|copy|both] [--stack-size BYTES]",
		"the hottest Ruby and C methods, live (keys: s, t, c, q)", runTop},
	{"snapshot", "-p PID [--format text|json] [--nonblocking] [--debug-file FILE]",
		"every thread's Ruby stack, read from outside", runSnapshot},
	{"heap", "-p PID [--stop [--stop-limit DURATION]] [--diff DURATION | --dump FILE] [-n N] [--format text|json] [--debug-file FILE]",
		"the live heap, read from outside: objects and slot bytes by class and type", runHeap},
	{"script", "[-i FILE] [--native | --ruby-only] [--weight cpu|objects|bytes] [--live] [--group-by KEY] [--debug-file FILE]..",
		"every sample as perf script prints it, with Ruby frames merged in", runScript},
	{"report", "[-i FILE] [--threads] [-n N] [--native | --ruby-only] [--weight cpu|objects|bytes] [--live] [--debug-file FILE]..",
		"the top functions, Ruby and native, by self and total time", runReport},
	{"convert", "[-i FILE] -f folded|pprof|speedscope|svg [-o OUT] [--native | --ruby-only] [--weight cpu|objects|bytes] [--live] " +
		"[--group-by KEY] [--debug-file FILE]..",
		"the recording as folded stacks, pprof, speedscope or an SVG flame graph", runConvert},
	{"inject", "[-i FILE] -o OUT [--map-dir DIR] [--native | --ruby-only] [--weight cpu|objects|bytes] [--live] [--debug-file FILE]..",
		"a perf.data with merged callchains, Ruby names in /tmp/perf-PID.map, for stock perf", runInject},
	{"offsets", "(BINARY | -p PID) [--format text|json|go] [--debug-file FILE] | --format go [--configure FLAGS] [--source TEXT] FILE..",
		"struct layout and VM symbols of a Ruby build", runOffsets},
	{"agent", "(--endpoint HOST:PORT [--protocol grpc|http] | --pyroscope URL) [--insecure | --ca-file FILE [--cert-file FILE --key-file FILE]] " +
		"[--header K=V].. [--interval 10s] [-F HZ] [--label K=V].. [--service-name NAME] [--match REGEXP] [--alloc [--live]] " +
		"[--native | --ruby-only] [--unwind tables|copy|both] [--stack-size BYTES] [--queue N] [--flush-timeout DURATION] [--memory-budget SIZE]",
		"continuous profiling: every Ruby process, OTLP profiles to an OpenTelemetry Collector", runAgent},
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: rubyperf COMMAND [ARGS]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n            %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(w, "  %-9s %s\n            %s\n", "version", "", "rubyperf's version, and the Go and platform it was built with")
	fmt.Fprintf(w, "\nrubyperf COMMAND -h: the command's flags\n")
}

// printFlags lists fs's flags as the usage lines spell them: a name of
// more than one letter with two dashes (the flag package takes one or
// two alike, and prints one).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			if name, _, _ := strings.Cut(strings.TrimRight(rest, "\n"), " "); len(strings.Split(name, "\t")[0]) > 1 {
				line = "  --" + rest
			}
		}
		io.WriteString(w, line)
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stderr)
		return 2
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		usage(stdout) // asked for: on stdout, for a pager
		return 0
	case args[0] == "version" || args[0] == "--version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		var ue usageError
		var es exitStatus
		switch {
		case err == nil:
			return 0
		case errors.As(err, &es):
			return int(es)
		case errors.Is(err, flag.ErrHelp):
			fmt.Fprintf(stdout, "usage: rubyperf %s %s\n  %s\n", c.name, c.args, c.summary)
			var h helpRequest
			if errors.As(err, &h) {
				printFlags(stdout, h.fs)
			}
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "rubyperf %s: %v\nusage: rubyperf %s %s\n", c.name, err, c.name, c.args)
			return 2
		default:
			// One line, whatever a path or name it quotes holds.
			fmt.Fprintf(stderr, "rubyperf: %s\n", export.Printable(err.Error()))
			return 1
		}
	}
	fmt.Fprintf(stderr, "rubyperf: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// parseFlagsOnly is parseFlags for a command that takes no positional
// argument: it refuses one.
func parseFlagsOnly(fs *flag.FlagSet, args []string) error {
	pos, err := parseFlags(fs, args)
	if err == nil && len(pos) > 0 {
		msg := fmt.Sprintf("unexpected argument %q", pos[0])
		if fs.Lookup("p") != nil {
			msg += ": give the process as -p PID (pgrep ruby lists the Rubies)"
		}
		err = usageError{msg}
	}
	return err
}

// parseFlags parses interspersed flags and positional arguments. After
// "--" everything is positional: `record -- ruby -e CODE` passes -e on.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpRequest{fs}
			}
			return nil, usageError{err.Error()}
		}
		rest := fs.Args()
		// Parse stops at the first positional argument, or consumes a
		// "--" and stops after it.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneOf refuses a flag's value that is none of allowed.
func oneOf(flagName, value string, allowed ...string) error {
	if slices.Contains(allowed, value) {
		return nil
	}
	return usageError{fmt.Sprintf("%s %q must be one of: %s", flagName, value, strings.Join(allowed, ", "))}
}

// writeJSON writes v as indented JSON, the documents of --format json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// helpRequest is -h or --help: the command's flags are printed.
type helpRequest struct{ fs *flag.FlagSet }

func (helpRequest) Error() string { return "help requested" }
func (helpRequest) Unwrap() error { return flag.ErrHelp }

// flagSet tells whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
