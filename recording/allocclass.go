package recording

import (
	"errors"
	"time"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// The class of an allocated object. At the refill that took its sample,
// the object's slot is still free: the sample carries only where it is
// (payload.Payload.AllocSlot). The program reads the slot's struct RBasic
// at the thread's next refill, a page of allocations later, and tells
// what it held (payload.AllocSeen, from a ring of its own). A weighed
// sample waits here until that comes, at most allocClassWait, and is
// written with the class's name (payload.SetAllocClass); the name is read
// from the live process as the recorder reads frame names. What comes
// first, the sample or what its slot held, waits for the other.

// FreedClassLabel is the class of an object freed before the refill that
// was to read it: a GC ran at that refill and swept it (it died young).
const FreedClassLabel = "[freed before its class was read]"

// allocClassWait bounds how long a weighed sample waits for what its slot
// held: a thread that stops allocating after its last sample never
// refills again to tell it.
const allocClassWait = 500 * time.Millisecond

// maxAllocWaiting bounds the samples waiting and the slots' reports kept
// for samples not yet weighed. Past it the samples waiting are written
// without a class, or the reports kept are forgotten.
const maxAllocWaiting = 1 << 12

type allocClasses struct {
	waiting map[payload.AllocKey]allocWaiting
	seen    map[payload.AllocKey]payload.AllocSeen
}

type allocWaiting struct {
	rec   []byte // the sample record, weighed
	since time.Time
}

// classAlloc writes a weighed allocation sample record with its object's
// class, or holds it until what its slot held is known.
func (s *session) classAlloc(rec []byte) error {
	raw := s.allocRaw(rec)
	if raw == nil {
		return s.write(rec)
	}
	k, err := payload.AllocKeyOf(raw)
	if err != nil || k.Slot == 0 {
		s.sum.AllocUnclassed++
		return s.write(rec)
	}
	c := &s.allocClass
	if e, ok := c.seen[k]; ok {
		delete(c.seen, k)
		s.setAllocClass(raw, &e)
		return s.write(rec)
	}
	if c.waiting == nil {
		c.waiting = map[payload.AllocKey]allocWaiting{}
	}
	if len(c.waiting) >= maxAllocWaiting {
		if err := s.flushAllocClasses(0); err != nil {
			return err
		}
	}
	if _, dup := c.waiting[k]; dup {
		s.sum.AllocUnclassed++ // a key twice (a thread id reused): neither can be told apart
		return s.write(rec)
	}
	c.waiting[k] = allocWaiting{rec: append([]byte(nil), rec...), since: time.Now()}
	return nil
}

// allocSeen takes what an allocation sample's slot held: the sample is
// written with its class if it waits, else the report waits for it.
func (s *session) allocSeen(e *payload.AllocSeen) error {
	k, c := e.Key(), &s.allocClass
	if w, ok := c.waiting[k]; ok {
		delete(c.waiting, k)
		if raw := s.allocRaw(w.rec); raw != nil {
			s.setAllocClass(raw, e)
		}
		return s.write(w.rec)
	}
	if c.seen == nil || len(c.seen) >= maxAllocWaiting {
		c.seen = map[payload.AllocKey]payload.AllocSeen{} // reports whose samples were lost
	}
	c.seen[k] = *e
	return nil
}

// setAllocClass names the class of the object e says the sample's slot
// held, and writes it into the sample's payload raw.
func (s *session) setAllocClass(raw []byte, e *payload.AllocSeen) {
	name := readback.UnknownLabelValue
	if t := s.targets[int(e.Pid)]; t != nil {
		n, err := t.Reader.ObjectClass(e.Flags, e.Klass)
		switch {
		case err == nil:
			name = n
		case errors.Is(err, rubystack.ErrNoObject):
			name = FreedClassLabel
		}
	}
	if name == readback.UnknownLabelValue || name == FreedClassLabel {
		s.sum.AllocUnclassed++
	} else {
		s.sum.AllocClassed++
	}
	if err := payload.SetAllocClass(raw, s.symtab.NameID(symtab.FrameInfo{Label: name})); err != nil {
		s.sum.AllocClassed-- // cannot happen: the sample was read as one
		s.sum.AllocUnclassed++
	}
}

// flushAllocClasses writes the samples that have waited at least wait for
// their slots' reports, without a class (0: all of them).
func (s *session) flushAllocClasses(wait time.Duration) error {
	c := &s.allocClass
	now := time.Now()
	for k, w := range c.waiting {
		if now.Sub(w.since) < wait {
			continue
		}
		delete(c.waiting, k)
		s.sum.AllocUnclassed++
		if err := s.write(w.rec); err != nil {
			return err
		}
	}
	return nil
}
