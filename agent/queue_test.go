package agent

import "testing"

// TestQueue: the oldest go first past either bound, each counted with its
// samples; a request taken to send is removed only if still there.
func TestQueue(t *testing.T) {
	q := newQueue(3, 1000)
	for i := range 5 {
		q.push(queued{req: Request{Body: make([]byte, 10), Samples: uint64(i + 1)}})
	}
	n, dropped, samples := q.stats()
	if n != 3 || dropped != 2 || samples != 1+2 {
		t.Fatalf("%d waiting, %d dropped (%d samples); want 3, 2 (3)", n, dropped, samples)
	}
	head, _ := q.peek()
	if head.req.Samples != 3 {
		t.Fatalf("oldest has %d samples, want 3", head.req.Samples)
	}
	q.push(queued{req: Request{Body: make([]byte, 995), Samples: 6}}) // over the bytes: all but it go
	if n, dropped, _ := q.stats(); n != 1 || dropped != 5 {
		t.Fatalf("%d waiting, %d dropped; want 1, 5", n, dropped)
	}
	q.pop(head) // dropped meanwhile: nothing to remove
	if n, _, _ := q.stats(); n != 1 {
		t.Fatalf("pop of a dropped request removed another")
	}
	last, _ := q.peek()
	q.pop(last)
	if _, ok := q.peek(); ok {
		t.Fatalf("queue not empty")
	}
}
