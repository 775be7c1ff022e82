// Package safefile opens for reading the files a user other than the caller
// may control: a mapped object's path, a recording and the .symbols file
// beside it, a perf map in /tmp, a debug file. The tool runs as root, and a
// neighbour can put a FIFO, a device or a socket at any of those paths: one
// open of a FIFO blocks until a writer comes, a read of a device may never
// end. Open refuses anything but a regular file, before opening it when the
// path already names one and again on the open descriptor, and never blocks
// in open (O_NONBLOCK) or takes a terminal as its controlling one
// (O_NOCTTY); ReadAll bounds what a whole-file read may take.
//
// Every package that reads such a file opens it here, so that there is one
// rule and one wording for what is refused ("PATH: it is a named pipe
// (FIFO), not a regular file"). Files of the kernel's own (/proc, /sys) need
// none of it. It imports only the standard library.
package safefile
