package main

import (
	"flag"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// inputFlags are the flags of every command that reads a recording.
type inputFlags struct {
	input        *string
	nativeInterp *bool
	noNative     *bool
}

func addInputFlags(fs *flag.FlagSet) inputFlags {
	return inputFlags{
		input:        fs.String("i", "rubyperf.data", "the recording to read"),
		nativeInterp: fs.Bool("native-interp", false, "keep the interpreter's own native frames (vm_exec_core, vm_call_*, ...)"),
		noNative:     fs.Bool("no-native", false, "Ruby frames only, like rbspy"),
	}
}

// stacks reads every merged stack of the recording.
func (f inputFlags) stacks() ([]merge.Stack, *recording.ReadStats, error) {
	var out []merge.Stack
	stats, err := recording.ReadStacks(*f.input, recording.ReadOptions{
		Merge: merge.Options{Interp: *f.nativeInterp, NoNative: *f.noNative},
	}, func(s merge.Stack) error {
		out = append(out, s)
		return nil
	})
	return out, stats, err
}
