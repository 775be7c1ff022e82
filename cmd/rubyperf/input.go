package main

import (
	"flag"
	"io"
	"slices"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// inputFlags are the flags of every command that reads a recording.
type inputFlags struct {
	input        *string
	nativeInterp *bool
	noNative     *bool
	debugFiles   *debugFiles
}

func addInputFlags(fs *flag.FlagSet) inputFlags {
	f := inputFlags{
		input:        fs.String("i", "rubyperf.data", "the recording to read"),
		nativeInterp: fs.Bool("native-interp", false, "keep the interpreter's own native frames (vm_exec_core, vm_call_*, ...)"),
		noNative:     fs.Bool("no-native", false, "Ruby frames only, like rbspy"),
		debugFiles:   &debugFiles{},
	}
	fs.Var(f.debugFiles, "debug-file", "a separate debug file, used for the mapped file with its build-id (repeatable)")
	return f
}

// readOptions are how the recording is read: merge options, and where
// debug files for stripped objects are found (local, --debug-file,
// DEBUGINFOD_URLS), misses told on stderr.
func (f inputFlags) readOptions(stderr io.Writer) recording.ReadOptions {
	return recording.ReadOptions{
		Merge:     merge.Options{Interp: *f.nativeInterp, NoNative: *f.noNative},
		Debuginfo: newFinder(stderr, *f.debugFiles),
	}
}

// stacks reads every merged stack of the recording into memory.
func (f inputFlags) stacks(stderr io.Writer) ([]merge.Stack, *recording.ReadStats, error) {
	var out []merge.Stack
	stats, err := recording.ReadStacks(*f.input, f.readOptions(stderr), func(s merge.Stack) error {
		s.Frames = slices.Clone(s.Frames)
		out = append(out, s)
		return nil
	})
	return out, stats, err
}
