package agent

import "sync"

// queued is one interval's export request waiting to be sent.
type queued struct {
	req Request
	seq uint64 // the order pushed
}

// queue holds the requests not sent yet, oldest first, within a count and
// a size: the newest interval pushes the oldest out, so a collector that
// is down costs bounded memory, and what comes back up first is recent.
// Sampling never waits for it.
type queue struct {
	mu             sync.Mutex
	items          []queued
	bytes          int
	maxItems       int
	maxBytes       int
	ready          chan struct{} // a token when items were added
	dropped        uint64        // requests pushed out
	droppedSamples uint64        // their samples
	pushed         uint64
}

func newQueue(maxItems, maxBytes int) *queue {
	return &queue{maxItems: max(maxItems, 1), maxBytes: maxBytes, ready: make(chan struct{}, 1)}
}

// push adds a request, dropping the oldest ones past the bounds; it says
// how many it dropped.
func (q *queue) push(it queued) int {
	q.mu.Lock()
	q.pushed++
	it.seq = q.pushed
	q.items = append(q.items, it)
	q.bytes += len(it.req.Body)
	n := 0
	for len(q.items) > 1 && (len(q.items) > q.maxItems || q.bytes > q.maxBytes) {
		q.bytes -= len(q.items[0].req.Body)
		q.droppedSamples += q.items[0].req.Samples
		q.items[0] = queued{}
		q.items = q.items[1:]
		q.dropped++
		n++
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return n
}

// peek is the oldest request, if any.
func (q *queue) peek() (queued, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return queued{}, false
	}
	return q.items[0], true
}

// pop removes it, the request peek gave, if it is still the oldest (push
// may have dropped it meanwhile).
func (q *queue) pop(it queued) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) > 0 && q.items[0].seq == it.seq {
		q.bytes -= len(q.items[0].req.Body)
		q.items[0] = queued{}
		q.items = q.items[1:]
	}
}

// stats is how many requests wait, and how many were dropped so far.
func (q *queue) stats() (waiting int, dropped, droppedSamples uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items), q.dropped, q.droppedSamples
}
