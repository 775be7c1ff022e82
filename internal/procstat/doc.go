// Package procstat reads /proc/PID/stat, whose fields follow a command name
// that may hold spaces and ')', for the recorder (is a target exiting?),
// the benchmarks and the tests (how much CPU did it use? whose child is
// it?). It knows nothing of Ruby, ELF, perf or BPF, and imports only the
// standard library.
package procstat
