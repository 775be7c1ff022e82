package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time by make (-X main.version=...): the
// release, or 0.0.0~gitDATE.COMMIT for a checkout. Empty in a plain go
// build: versionLine then says what the build itself recorded.
var version string

// versionLine is what `rubyperf version` prints: the version, and the Go
// and platform it was built with.
func versionLine() string {
	v := version
	if info, ok := debug.ReadBuildInfo(); ok && v == "" {
		v = info.Main.Version // a go install of a tagged module
		rev, modified := "", false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if (v == "" || v == "(devel)") && rev != "" {
			v = "commit " + rev[:min(len(rev), 12)]
			if modified {
				v += " (modified)"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("rubyperf %s (%s, %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
