package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/export"
)

// recordDebuginfodTimeout bounds what record's attach waits for debuginfod:
// a recording must not wait on a server. Reading commands use the
// environment's DEBUGINFOD_TIMEOUT (elfutils' default 90s).
const recordDebuginfodTimeout = 2 * time.Second

// debugFiles is a repeatable --debug-file flag.
type debugFiles []string

func (d *debugFiles) String() string { return strings.Join(*d, ",") }

func (d *debugFiles) Set(s string) error {
	*d = append(*d, s)
	return nil
}

// newFinder finds debug files as elfutils' client would (DEBUGINFOD_URLS,
// its cache and timeouts), plus the files given with --debug-file; each
// lookup that misses on a server is one line on stderr.
func newFinder(stderr io.Writer, files []string) *debuginfo.Finder {
	var mu sync.Mutex
	f := debuginfo.FromEnv(func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "rubyperf: %s\n", export.Printable(msg)) // it names a file a target mapped
	})
	f.Files = files
	return f
}

// recordFinder is newFinder with a short timeout: record's attach asks
// debuginfod, but never for long.
func recordFinder(stderr io.Writer) *debuginfo.Finder {
	f := newFinder(stderr, nil)
	if f.Timeout <= 0 || f.Timeout > recordDebuginfodTimeout {
		f.Timeout = recordDebuginfodTimeout
	}
	if f.MaxTime <= 0 || f.MaxTime > recordDebuginfodTimeout {
		f.MaxTime = recordDebuginfodTimeout
	}
	return f
}
