package testruby

import (
	"bytes"
	"sync"
)

// Log is an output a process (or a goroutine) writes while the test reads
// it: a program's stderr, an agent's log.
type Log struct {
	// Max, when set, bounds the bytes kept: what comes past it is dropped
	// (a server that logs every request for the whole test).
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Max > 0 && l.b.Len() > l.Max {
		return len(p), nil
	}
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
