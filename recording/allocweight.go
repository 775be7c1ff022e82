package recording

import (
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
)

// An allocation sample leaves the program with the objects and bytes of
// the refills it stands for as they were seen, and the window it was
// seen in (payload.Payload.AllocWindow). What a window stands for is
// known only once it has ended (watchAllocations): then its samples are
// weighed, each by the window's weight, and written. The recorder names a
// sample as it reads it, like any other, and holds it until then.

// allocKey is one window of one target.
type allocKey struct {
	pid    uint32
	window uint32
}

// maxAllocHeld bounds the allocation samples held for their windows'
// weights: a window is at most allocSteady long and sees at most
// allocTrapBudget refills a second, all targets together. Past it, the
// oldest window's samples are written with their target's latest weight.
const maxAllocHeld = 1 << 12

// maxAllocWeights bounds the windows whose weights are kept for samples
// read after them (a drain's worth of time late).
const maxAllocWeights = 1 << 12

type allocHeld struct {
	held    map[allocKey][][]byte // records, as written, by window
	n       int                   // records held
	order   []allocKey            // windows with records held, oldest first (may name released ones)
	weights map[allocKey]float64  // the weights of windows that have ended
	latest  map[uint32]float64    // each target's latest window's weight
	// record is what weighAlloc decodes a held record into.
	record perfdata.RecordBuffer
}

// allocSample takes a named allocation sample record (s.raw): it writes
// it weighed when its window has ended, else holds it until then.
func (s *session) allocSample(p *payload.Payload) error {
	s.followAlloc(p)
	k := allocKey{p.PID, p.AllocWindow}
	if w, ok := s.alloc.weights[k]; ok {
		s.weighAlloc(s.raw, w)
		return s.classAlloc(s.raw)
	}
	if s.alloc.held == nil {
		s.alloc.held = map[allocKey][][]byte{}
	}
	if s.alloc.n >= maxAllocHeld {
		if err := s.releaseOldestAlloc(); err != nil {
			return err
		}
	}
	if _, ok := s.alloc.held[k]; !ok {
		s.alloc.order = append(s.alloc.order, k)
	}
	s.alloc.held[k] = append(s.alloc.held[k], append([]byte(nil), s.raw...))
	s.alloc.n++
	return nil
}

// allocWeighed takes the weight of target pid's window: each object its
// refills were seen to hand out stands for weight objects. The window's
// samples held are written, and those read later will be.
func (s *session) allocWeighed(pid int, window uint32, weight float64) error {
	k := allocKey{uint32(pid), window}
	if s.alloc.weights == nil || len(s.alloc.weights) >= maxAllocWeights {
		s.alloc.weights = map[allocKey]float64{}
	}
	if s.alloc.latest == nil {
		s.alloc.latest = map[uint32]float64{}
	}
	s.alloc.weights[k] = weight
	s.alloc.latest[k.pid] = weight
	return s.releaseAlloc(k, weight)
}

// releaseAlloc writes window k's samples held, weighed by weight.
func (s *session) releaseAlloc(k allocKey, weight float64) error {
	recs := s.alloc.held[k]
	delete(s.alloc.held, k)
	s.alloc.n -= len(recs)
	for _, rec := range recs {
		s.weighAlloc(rec, weight)
		if err := s.classAlloc(rec); err != nil {
			return err
		}
	}
	return nil
}

// latestAllocWeight is the weight of pid's latest window that has ended,
// or 1 (the refills as seen) before any.
func (s *session) latestAllocWeight(pid uint32) float64 {
	if w, ok := s.alloc.latest[pid]; ok {
		return w
	}
	return 1
}

// releaseOldestAlloc writes the samples of the oldest window held, with
// their target's latest weight.
func (s *session) releaseOldestAlloc() error {
	for len(s.alloc.order) > 0 {
		k := s.alloc.order[0]
		s.alloc.order = s.alloc.order[1:]
		if _, ok := s.alloc.held[k]; ok {
			s.sum.AllocUnweighed += uint64(len(s.alloc.held[k]))
			return s.releaseAlloc(k, s.latestAllocWeight(k.pid))
		}
	}
	return nil
}

// flushAlloc writes every sample still held when the recording ends, of
// windows that never ended (a target that exited in one), with their
// target's latest weight.
func (s *session) flushAlloc() error {
	for _, k := range s.alloc.order {
		if _, ok := s.alloc.held[k]; ok {
			s.sum.AllocUnweighed += uint64(len(s.alloc.held[k]))
			if err := s.releaseAlloc(k, s.latestAllocWeight(k.pid)); err != nil {
				return err
			}
		}
	}
	s.alloc.order = nil
	return nil
}

// weighAlloc multiplies an allocation sample record's (header and data)
// objects and bytes by weight: its period, and its payload's.
func (s *session) weighAlloc(rec []byte, weight float64) {
	raw := s.allocRaw(rec)
	if raw == nil {
		return
	}
	if objects, err := payload.WeighAlloc(raw, weight); err == nil {
		perfdata.SetSamplePeriod(rec, &s.attr, objects)
	}
}

// allocRaw is the payload of an allocation sample record (header and
// data), where it lies in rec; nil if rec is no sample.
func (s *session) allocRaw(rec []byte) []byte {
	r, err := perfdata.DecodeRecordInto(rec, &s.attr, &s.alloc.record)
	smp, ok := r.(*perfdata.Sample)
	if err != nil || !ok {
		return nil
	}
	return smp.Raw
}
