// Package outfile writes the files rubyperf's commands produce (a
// recording, a converted profile, an injected perf.data) the way a tool run
// as root must: where the path is in a directory others can write to
// (/tmp), it may hold a symbolic or hard link, a FIFO or a device planted
// by another user. A file is written beside its path under a name nobody
// could have planted (O_EXCL) and renamed over the path when complete, so
// nothing at the path is ever opened or written through, and a reader
// never sees half a file.
//
// It owns that check and that rename; it must not know what the files
// hold.
package outfile
