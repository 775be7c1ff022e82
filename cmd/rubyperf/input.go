package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/readback"
)

// inputFlags are the flags of every command that reads a recording.
type inputFlags struct {
	input      *string
	native     *bool
	rubyOnly   *bool
	weight     *string
	live       *bool
	debugFiles *debugFiles
	// every: read CPU and allocation samples alike (inject writes each
	// sample of the recording).
	every bool
}

func addInputFlags(fs *flag.FlagSet) inputFlags {
	f := inputFlags{
		input:    fs.String("i", "rubyperf.data", "the recording to read"),
		native:   fs.Bool("native", false, "every native frame, the interpreter's own between Ruby frames included"),
		rubyOnly: fs.Bool("ruby-only", false, "Ruby frames and C methods only, like rbspy"),
		weight: fs.String("weight", "", "cpu (CPU samples, by time), or objects or bytes (allocation samples of record --alloc, "+
			"by what they allocated); default: cpu, or objects for a recording of allocations only"),
		live: fs.Bool("live", false, "allocation samples whose objects were still alive when the recording ended, "+
			"having survived a GC (record --alloc --live)"),
		debugFiles: &debugFiles{},
	}
	fs.Var(f.debugFiles, "debug-file", "a separate debug file, used for the mapped file with its build-id (repeatable)")
	return f
}

// readOptions are how the recording is read: merge options, and where
// debug files for stripped objects are found (local, --debug-file,
// DEBUGINFOD_URLS), misses told on stderr.
func (f inputFlags) readOptions(stderr io.Writer) readback.ReadOptions {
	kind := readback.KindAuto
	switch *f.weight {
	case "cpu":
		kind = readback.KindCPU
	case "objects", "bytes":
		kind = readback.KindAlloc
	}
	if *f.live {
		kind = readback.KindAlloc
	}
	if f.every {
		kind = readback.KindAll
	}
	return readback.ReadOptions{
		Kind:      kind,
		Merge:     merge.Options{View: f.view()},
		Debuginfo: newFinder(stderr, *f.debugFiles),
		Warn:      export.LineWriter{W: stderr}, // its lines may quote what a target named
	}
}

// view is the view the flags ask for (parse refuses both at once).
func (f inputFlags) view() merge.View {
	switch {
	case *f.native:
		return merge.ViewNative
	case *f.rubyOnly:
		return merge.ViewRubyOnly
	}
	return merge.ViewRuby
}

// parse parses args as parseFlagsOnly does, and refuses input flags that
// contradict each other.
func (f inputFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *f.native && *f.rubyOnly {
		return usageError{"--native and --ruby-only ask for opposite views: give one"}
	}
	if *f.weight != "" {
		if err := oneOf("--weight", *f.weight, "cpu", "objects", "bytes"); err != nil {
			return err
		}
	}
	if *f.live && *f.weight == "cpu" {
		return usageError{"--live shows allocation samples: --weight objects or bytes"}
	}
	if _, err := os.Stat(*f.input); errors.Is(err, os.ErrNotExist) {
		if !flagSet(fs, "i") {
			return fmt.Errorf("%s: no recording here: record one first (rubyperf record -p PID, or -- ruby app.rb), or name one with -i FILE", *f.input)
		}
		return fmt.Errorf("%s: no such file", *f.input)
	}
	return nil
}

// keep says whether a stack is in the view: with --live, only allocation
// samples whose objects were alive at the end.
func (f inputFlags) keep(s *merge.Stack) bool { return !*f.live || s.Alive }

// checkLive refuses --live on a recording that followed no object.
func (f inputFlags) checkLive(stats *readback.ReadStats) error {
	if *f.live && stats != nil && stats.Live == nil {
		return fmt.Errorf("%s: --live: this recording did not follow its allocated objects; record with --alloc --live", *f.input)
	}
	return nil
}

// weigh gives an allocation sample the weight --weight asks for: its
// objects (Period), or its bytes.
func (f inputFlags) weigh(s *merge.Stack) {
	if s.Alloc && *f.weight == "bytes" {
		s.Period = s.AllocBytes
	}
}

// stacks reads every merged stack of the recording into memory.
func (f inputFlags) stacks(stderr io.Writer) ([]merge.Stack, *readback.ReadStats, error) {
	var out []merge.Stack
	stats, err := readback.ReadStacks(*f.input, f.readOptions(stderr), func(s merge.Stack) error {
		if !f.keep(&s) {
			return nil
		}
		f.weigh(&s)
		s.Frames = slices.Clone(s.Frames)
		out = append(out, s)
		return nil
	})
	if err == nil {
		err = f.checkLive(stats)
	}
	return out, stats, err
}
