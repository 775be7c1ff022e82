// Package perfdata reads and writes perf.data files (file and pipe mode):
// the header, attributes, records and feature sections, laid out as the
// kernel and perf define them, so stock perf opens what it writes.
//
// It owns the byte layouts of tools/perf/Documentation/perf.data-file-format.txt,
// tools/perf/util/header.c and include/uapi/linux/perf_event.h: struct
// perf_event_attr (Attr), the records of a perf ring buffer (Sample, Comm,
// Mmap, Mmap2, Fork, Exit, Lost, ...), their sample_id trailers, and the
// feature sections perf 6.1 reads (strings, CMDLINE, NRCPUS, EVENT_DESC,
// BUILD_ID). The Writer writes file mode only (it seeks back to finish the
// header); the Reader reads both modes, pipe mode from a plain io.Reader.
// Everything is little-endian, the native order of x86_64 and arm64.
//
// Facts about perf 6.1 this package relies on, checked against
// /usr/bin/perf: it refuses attrs larger than 128 bytes, so the Writer
// writes 128; it processes records in time order, so synthesized COMM and
// MMAP2 records need a sample_id trailer with an earlier TIME than the
// samples they explain; and it skips feature bits it does not know (6.1
// knows 1 to 31), so high bits, 200 and up, can carry a tool's private
// data without colliding with features newer perf versions add.
//
// It must not know about Ruby, eBPF, or how records are collected: it
// copies and encodes records, and checks only what the format requires.
// It imports only the standard library and internal/safefile (which opens
// a recording without blocking on a FIFO planted in its place).
package perfdata
