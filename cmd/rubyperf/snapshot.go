package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/rubystack"
)

func runSnapshot(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	target := addRubyTargetFlags(fs, "text", "json")
	pid, format := target.pid, target.format
	nonblocking := fs.Bool("nonblocking", false, "do not stop the process while reading it (frames of running threads may come out [unknown])")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *pid == 0 {
		return usageError{"give -p PID"}
	}
	if err := target.checkFormat(); err != nil {
		return err
	}
	r, closeReader, err := target.openReader(stderr)
	if err != nil {
		return err
	}
	defer closeReader()
	thaw := func() {}
	if !*nonblocking {
		// Stopped for the length of one walk (about a millisecond), the
		// stacks are exactly what Ruby would say.
		if thaw, err = rubystack.Freeze(*pid); err != nil {
			return err
		}
	}
	stacks, err := r.Snapshot()
	thaw()
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeSnapshotJSON(stdout, *pid, r.Layout.Version.String(), stacks)
	}
	writeSnapshotText(stdout, *pid, r.Layout.Version.String(), stacks)
	return nil
}

// snapshotJSON is the document of `rubyperf snapshot --format json`.
type snapshotJSON struct {
	PID     int          `json:"pid"`
	Version string       `json:"version"`
	Threads []threadJSON `json:"threads"`
}

type threadJSON struct {
	TID    int         `json:"tid"`
	Name   string      `json:"name"`
	Frames []frameJSON `json:"frames"`
}

type frameJSON struct {
	Label string  `json:"label"`
	Path  *string `json:"path"` // null for C methods, as rb_profile_frame_path
	Line  int64   `json:"line"`
}

func writeSnapshotJSON(w io.Writer, pid int, version string, stacks []rubystack.ThreadStack) error {
	doc := snapshotJSON{PID: pid, Version: version, Threads: []threadJSON{}}
	for _, s := range stacks {
		t := threadJSON{TID: s.TID, Name: s.Name, Frames: []frameJSON{}}
		for _, f := range s.Frames {
			fj := frameJSON{Label: f.Label, Line: f.Line}
			if f.HasPath {
				p := f.Path
				fj.Path = &p
			}
			t.Frames = append(t.Frames, fj)
		}
		doc.Threads = append(doc.Threads, t)
	}
	return writeJSON(w, doc)
}

// writeSnapshotText prints each thread like a Ruby backtrace: a C method
// shows the location of the Ruby code that called it. Labels, paths and
// thread names are Printable: the target chose them.
func writeSnapshotText(w io.Writer, pid int, version string, stacks []rubystack.ThreadStack) {
	fmt.Fprintf(w, "pid %d, Ruby %s, %d threads\n", pid, version, len(stacks))
	for _, s := range stacks {
		fmt.Fprintf(w, "\nthread %d \"%s\"\n", s.TID, export.Printable(s.Name))
		for i, f := range s.Frames {
			loc := "<cfunc>"
			if f.HasPath {
				loc = fmt.Sprintf("%s:%d", export.Printable(f.Path), f.Line)
			} else {
				for _, caller := range s.Frames[i+1:] {
					if caller.HasPath {
						loc = fmt.Sprintf("%s:%d", export.Printable(caller.Path), caller.Line)
						break
					}
				}
			}
			fmt.Fprintf(w, "\t%s:in '%s'\n", loc, export.Printable(f.Label))
		}
	}
}
