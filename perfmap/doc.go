// Package perfmap reads and writes /tmp/perf-PID.map symbol files, appending
// beside what YJIT or ZJIT wrote without clobbering it, and refusing links and
// non-regular files (the tool runs as root in a shared /tmp).
//
// It must not know about Ruby or perf.data; it imports only the standard library.
package perfmap
