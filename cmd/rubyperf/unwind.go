package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/rubyperf/rubyperf/bpf"
)

// nativeStackFlags are record's and agent's flags for how native user
// frames are found.
type nativeStackFlags struct {
	fs        *flag.FlagSet
	unwind    *string
	stackSize *int
}

func addNativeStackFlags(fs *flag.FlagSet) nativeStackFlags {
	return nativeStackFlags{fs: fs,
		unwind: fs.String("unwind", "tables", "how native user frames are found: tables (the BPF program unwinds each stack with the objects' call frame information, at any depth; "+
			"the copy where the program is not built for the machine), copy (a copy of --stack-size bytes of stack, unwound afterwards), or both (tables, and the copy where they stop short)"),
		stackSize: fs.Int("stack-size", int(bpf.DefaultOptions.StackSize), "bytes of native stack each sample copies for unwinding (perf's dwarf,SIZE; --unwind copy or both); 0: none"),
	}
}

// options checks the flags and says what recording.Options take: whether
// the program unwinds with tables, and the stack copy's size (-1: none, 0:
// the default). Where the program has no native unwinding (it is built for
// x86_64 alone), the default is the copy, said in one line on stderr.
func (f nativeStackFlags) options(stderr io.Writer) (tables bool, stackSize int, err error) {
	switch *f.unwind {
	case "tables", "copy", "both":
	default:
		return false, 0, usageError{fmt.Sprintf("--unwind %q: tables, copy or both", *f.unwind)}
	}
	if *f.unwind == "tables" && !bpf.NativeTablesBuilt && !flagSet(f.fs, "unwind") {
		fmt.Fprintf(stderr, "rubyperf: native unwinding in the BPF program is not built for %s: native frames come from a %d-byte stack copy (--unwind copy)\n",
			runtime.GOARCH, bpf.DefaultOptions.StackSize)
		*f.unwind = "copy"
	}
	if n := *f.stackSize; n < 0 || n%8 != 0 || n > bpf.MaxStackSize {
		return false, 0, usageError{fmt.Sprintf("--stack-size %d: a multiple of 8 from 0 to %d", n, bpf.MaxStackSize)}
	}
	stackSize = *f.stackSize
	if stackSize == 0 || *f.unwind == "tables" && !flagSet(f.fs, "stack-size") {
		stackSize = -1 // none; recording.Options' zero value is the default
	}
	return *f.unwind != "copy", stackSize, nil
}
