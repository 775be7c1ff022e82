// Package perfmap reads and writes /tmp/perf-PID.map symbol files, appending
// beside what YJIT or ZJIT wrote without clobbering it, and refusing links and
// non-regular files (the tool runs as root in a shared /tmp).
//
// A perf map (tools/perf/Documentation/jit-interface.txt) has one symbol a
// line, "START SIZE name": START and SIZE in hex, the name the rest of the
// line. perf reads /tmp/perf-<tgid>.map, at report time and from no other
// directory, for a sample that falls in an executable anonymous mapping
// (an MMAP2 named "//anon" with PROT_EXEC), taking its addresses as
// absolute. Ruby's --yjit-perf ("[JIT] Integer#times") and --zjit-perf
// ("zjit::...", "0x"-prefixed in some versions) write that same file, so a
// tool that names synthetic addresses there must share it: Map and
// WriteSynthetic only ever append, never truncate, and put their entries in
// a range disjoint from everything already in the file (FreeBase, above
// Floor, where no real mapping can be). WriteSynthetic of entries the file
// already holds at one base returns that base and appends nothing, so the
// same names written again do not grow the file.
//
// Facts about perf 6.1 this package relies on, checked against
// /usr/bin/perf with synthetic perf.data files: a 0x prefix, upper-case
// hex, leading blanks and any one separator byte (space, tab, comma) are
// accepted; names shorter than 3 bytes are ignored, so Append refuses them;
// the last line loses its last byte when it has no newline, so every line
// written ends with one; a "\r" stays in the name; addresses from Floor up
// (non-canonical, never mapped) symbolise like any other.
//
// Safety: the tool runs as root in a world-writable /tmp, so Open refuses a
// symbolic link, a directory, a FIFO or device (without opening it), a file
// with several hard links, and a file owned by anyone but the caller or the
// profiled process's owner; the checks repeat on the open descriptor. It
// locks the file (flock) while it reads and appends, so locking writers
// never interleave, and writes whole lines.
//
// It must not know about Ruby or perf.data; it imports only the standard
// library and internal/safefile.
package perfmap
