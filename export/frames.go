package export

import (
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/rubyperf/rubyperf/merge"
)

// Root chooses the frame that folded stacks and flame graphs put under
// each stack's outermost frame.
type Root uint8

const (
	// RootComm roots each stack at its thread name (Comm), as
	// stackcollapse-perf.pl does. It is the default.
	RootComm Root = iota
	// RootNone adds no root frame: the stacks of all threads merge.
	RootNone
	// RootPID roots each stack at "comm-PID", as stackcollapse-perf.pl --pid.
	RootPID
	// RootTID roots each stack at "comm-PID/TID", as stackcollapse-perf.pl --tid.
	RootTID
)

// Weight chooses what one stack counts for in folded stacks and flame
// graphs.
type Weight uint8

const (
	// WeightTime counts the CPU time a sample stands for: the sum of the
	// stacks' Period, in nanoseconds. It is the default, and what
	// stackcollapse-perf.pl does with perf's period column. When no stack
	// has a Period, samples are counted instead.
	WeightTime Weight = iota
	// WeightSamples counts samples.
	WeightSamples
)

// Unit is what the stacks' Period counts.
type Unit uint8

const (
	// UnitNanoseconds: time, CPU or wall-clock (the default).
	UnitNanoseconds Unit = iota
	// UnitObjects: objects allocated (allocation samples, merge.Stack.Alloc).
	UnitObjects
	// UnitBytes: bytes allocated (allocation samples weighed by bytes).
	UnitBytes
)

// amount says n of unit u for a person: "1.25 ms", "12345 objects",
// "1.5 MiB".
func (u Unit) amount(n uint64) string {
	switch u {
	case UnitObjects:
		return strconv.FormatUint(n, 10) + " objects"
	case UnitBytes:
		return HumanBytes(n)
	}
	return duration(n)
}

// HumanBytes says n bytes with a binary unit: "512 bytes", "12.5 MiB".
func HumanBytes(n uint64) string {
	v, unit := float64(n), "bytes"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	if unit == "bytes" {
		return strconv.FormatUint(n, 10) + " bytes"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + unit
}

// Builder is one format built a stack at a time: Pprof, Folded,
// FlameGraph or Speedscope.
type Builder interface {
	Add(*merge.Stack)
	Write(io.Writer) error
}

// writeAll adds every stack to b and writes it.
func writeAll(w io.Writer, stacks []merge.Stack, b Builder) error {
	for i := range stacks {
		b.Add(&stacks[i])
	}
	return b.Write(w)
}

// unknown is the name of a frame or thread nothing is known about.
const unknown = "[unknown]"

// FrameName is the text that stands for f in every format, Printable. A native or
// kernel frame with no symbol is named after its object file, as
// stackcollapse-perf.pl does ("[libc.so.6]"), so unknown frames of
// different libraries stay apart.
func FrameName(f *merge.Frame) string {
	name := f.Name
	if (name == "" || name == unknown) && f.File != "" && (f.Kind == merge.KindNative || f.Kind == merge.KindKernel) {
		if strings.HasPrefix(f.File, "[") {
			return Printable(f.File)
		}
		return "[" + Printable(path.Base(f.File)) + "]"
	}
	if name == "" {
		return unknown
	}
	return Printable(name)
}

// threadName is the name of s's thread, never empty.
func threadName(s *merge.Stack) string {
	if s.Comm == "" {
		return unknown
	}
	return Printable(s.Comm)
}

// rootName returns the root frame r puts under s, and false for RootNone.
func rootName(s *merge.Stack, r Root) (string, bool) {
	switch r {
	case RootNone:
		return "", false
	case RootPID:
		return threadName(s) + "-" + strconv.Itoa(s.PID), true
	case RootTID:
		return threadName(s) + "-" + strconv.Itoa(s.PID) + "/" + strconv.Itoa(s.TID), true
	}
	return threadName(s), true
}

// kindLabel is how people call a frame kind, in tooltips and legends.
func kindLabel(k merge.Kind) string {
	switch k {
	case merge.KindRuby:
		return "Ruby"
	case merge.KindCFunc:
		return "C method"
	case merge.KindNative:
		return "native"
	case merge.KindKernel:
		return "kernel"
	case merge.KindState:
		return "thread state"
	case merge.KindLabel:
		return "request label"
	}
	return "unknown"
}
