package payload

import "errors"

// AllocSeen says what the slot of an allocation sample held a page of
// allocations later, at its thread's next refill: the sample of thread
// Tid of process Pid taken in window Window, numbered Seq, whose AllocSlot
// is Slot; Flags
// and Klass are the object's struct RBasic then. The program writes it to
// a ring of its own, not into a sample.
type AllocSeen = cAllocSeen

// AllocKey is what joins an allocation sample and the AllocSeen of its
// slot.
type AllocKey struct {
	PID, TID, Window, Seq uint32
	Slot                  uint64
}

// Key is the AllocKey of the sample e tells of.
func (e *AllocSeen) Key() AllocKey {
	return AllocKey{PID: e.Pid, TID: e.Tid, Window: e.Window, Seq: e.Seq, Slot: e.Slot}
}

// AllocKeyOf reads the AllocKey of an allocation sample's RAW payload as
// the program wrote it. Slot 0: the sample's slot is not known.
func AllocKeyOf(raw []byte) (AllocKey, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return AllocKey{}, err
	}
	if h.Flags&Alloc == 0 || h.Flags&Compact != 0 {
		return AllocKey{}, errors.New("payload: not an allocation sample as the program writes it")
	}
	return AllocKey{PID: h.Pid, TID: h.Tid, Window: h.AllocWindow, Seq: h.AllocSeq, Slot: h.AllocSlot}, nil
}
