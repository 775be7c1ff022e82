package main

import "github.com/rubyperf/rubyperf/merge"

func mergeOptions(in inputFlags) merge.Options {
	return merge.Options{Interp: *in.nativeInterp, NoNative: *in.noNative}
}
