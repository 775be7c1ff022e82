// Package debuginfo finds the separate debug information of an ELF file,
// where distributions and users put it: an explicit file (--debug-file), the
// build-id tree under /usr/lib/debug/.build-id/, the file's .gnu_debuglink
// (beside it, in its .debug/ directory, under /usr/lib/debug/; CRC32
// checked), and debuginfod servers (DEBUGINFOD_URLS) through elfutils' client
// cache, whose layout and negative-cache rules it shares.
//
// It owns the lookup order, the cache, and the bounds on everything read from
// outside: build-ids are hex, debuglinks are plain names, candidate files are
// opened inside the target's root, downloads are bounded in size and time,
// and a server that fails costs its timeout once per run. NewELF and
// CheckSymbolTable hold the bounds on what debug/elf reads whole (section
// headers, the section-name table, a symbol table and its strings) for every
// package that opens an ELF file another user may have written.
//
// It must not know about Ruby, perf, or output formats: callers hand it an
// ELF file's identity and get back the path of a matching debug file. It
// imports only the standard library, golang.org/x/sys and internal/safefile.
package debuginfo
