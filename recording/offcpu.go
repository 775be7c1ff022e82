package recording

import (
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"golang.org/x/sys/unix"
)

// Wall-clock recording (Options.Wall): the program samples a thread as it
// leaves a CPU, where it blocks, and tells the recorder (payload.OffCPUEnd)
// when it is back on one. The sample's weight is the time between, known
// only then: the recorder names the sample as it reads it, like any other,
// and holds it until its end arrives. The two come through different
// rings, in either order.

// offCPUKey finds a thread's interval off the CPU: the program stamps its
// sample with the time the thread left (in the payload's period), and the
// end with the same time.
type offCPUKey struct {
	tid  uint32
	left uint64
}

// maxOffCPUHeld bounds the off-CPU samples held for their ends (each up to
// 64 KiB, about 8 KiB with the default stack copy): a thread is off a CPU
// at most once at a time, so this is more blocked threads than most
// processes have. Past it, the oldest held sample is written with the time
// its thread has been off so far (Summary.OffCPUCut counts them).
const maxOffCPUHeld = 1 << 12

// maxOffCPUEarly bounds the ends held for samples not read yet: an end
// arrives before its sample only by a drain's worth of time, and one whose
// sample the kernel dropped never finds it.
const maxOffCPUEarly = 1 << 14

type offCPU struct {
	held  map[offCPUKey][]byte // records, as written, waiting for their ends
	order []offCPUKey          // held, oldest first (may name released ones)
	early map[offCPUKey]uint64 // ends whose samples have not been read
	last  map[uint32]uint64    // each thread's latest off-CPU sample (its left)
	// record is what weigh decodes a held record into.
	record perfdata.RecordBuffer
}

// monotonicNow is CLOCK_MONOTONIC in ns, the program's bpf_ktime_get_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// weigh writes into an off-CPU sample record (header and data) the time its
// thread stayed off the CPU: its period, and its payload's.
func (s *session) weigh(rec []byte, ns uint64) {
	r, err := perfdata.DecodeRecordInto(rec, &s.attr, &s.off.record)
	smp, ok := r.(*perfdata.Sample)
	if err != nil || !ok {
		return
	}
	if payload.SetOffCPU(smp.Raw, ns) == nil {
		perfdata.SetSamplePeriod(rec, &s.attr, ns)
	}
}

// offCPUSample takes a named off-CPU sample record (s.raw): it writes it
// weighed when its end came first, else holds it for its end.
func (s *session) offCPUSample(p *payload.Payload) error {
	k := offCPUKey{p.TID, p.Period}
	if end, ok := s.off.early[k]; ok {
		delete(s.off.early, k)
		s.weigh(s.raw, end-min(end, k.left))
		return s.write(s.raw)
	}
	if s.off.held == nil || len(s.off.last) >= maxOffCPUThreads {
		// Forgetting threads' latest intervals only weakens the check at
		// the end (flushOffCPU) for samples held that long.
		s.off.last = map[uint32]uint64{}
	}
	if s.off.held == nil {
		s.off.held = map[offCPUKey][]byte{}
	}
	s.off.last[k.tid] = k.left
	if len(s.off.held) >= maxOffCPUHeld {
		if err := s.releaseOldestOffCPU(); err != nil {
			return err
		}
	}
	s.off.held[k] = append([]byte(nil), s.raw...)
	s.off.order = append(s.off.order, k)
	if len(s.off.order) > 2*len(s.off.held)+1024 {
		// Most of order names samples written since: keep the held ones.
		order := s.off.order[:0]
		for _, k := range s.off.order {
			if _, ok := s.off.held[k]; ok {
				order = append(order, k)
			}
		}
		s.off.order = order
	}
	return nil
}

// maxOffCPUThreads bounds the threads whose latest interval is remembered.
const maxOffCPUThreads = 1 << 16

// offCPUEnd takes the end of a thread's interval off a CPU.
func (s *session) offCPUEnd(e *payload.OffCPUEnd) error {
	k := offCPUKey{e.Tid, e.Left}
	if rec, ok := s.off.held[k]; ok {
		delete(s.off.held, k)
		s.weigh(rec, e.End-min(e.End, e.Left))
		return s.write(rec)
	}
	if s.off.early == nil || len(s.off.early) >= maxOffCPUEarly {
		s.sum.OffCPUEndsUnmatched += uint64(len(s.off.early))
		s.off.early = map[offCPUKey]uint64{}
	}
	s.off.early[k] = e.End
	return nil
}

// releaseOldestOffCPU writes the oldest held sample weighed by the time its
// thread has been off so far.
func (s *session) releaseOldestOffCPU() error {
	for len(s.off.order) > 0 {
		k := s.off.order[0]
		s.off.order = s.off.order[1:]
		if rec, ok := s.off.held[k]; ok {
			delete(s.off.held, k)
			s.sum.OffCPUCut++
			s.weigh(rec, monotonicNow()-min(monotonicNow(), k.left))
			return s.write(rec)
		}
	}
	return nil
}

// flushOffCPU writes every held sample when the recording ends: its thread
// is still off a CPU, and weighs the time it was off while recorded.
func (s *session) flushOffCPU() error {
	now := monotonicNow()
	for _, k := range s.off.order {
		if rec, ok := s.off.held[k]; ok {
			delete(s.off.held, k)
			if s.off.last[k.tid] != k.left {
				// Its thread left a CPU again later, so this interval
				// ended, but its end never came (seen: a few in a
				// thousand with threads handing the GVL on 100 times a
				// second). Its time off is not known: it weighs nothing
				// rather than a guess.
				s.sum.OffCPUUnknown++
				s.weigh(rec, 0)
			} else {
				s.weigh(rec, now-min(now, k.left))
			}
			if err := s.write(rec); err != nil {
				return err
			}
		}
	}
	s.off.order = nil
	s.sum.OffCPUEndsUnmatched += uint64(len(s.off.early))
	s.off.early = nil
	return nil
}
