// Package perfdata reads and writes perf.data files (file and pipe mode):
// the header, attributes, records and feature sections, laid out as the
// kernel and perf define them, so stock perf opens what it writes.
//
// It must not know about Ruby; it imports only the standard library.
package perfdata
