package recording

import (
	"errors"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/rubystack"
)

// maxKnownEnvs bounds what a target remembers of the environment chains it
// walked in one GC interval; past it, it starts afresh.
const maxKnownEnvs = 4096

// envChains is what a target remembers of the environment chains walked for
// its samples: where each led, for the GC interval it was read in (an
// environment that escaped to the heap, the one a long chain is left at, is
// freed only by the GC).
type envChains struct {
	at    bpf.GCStamp // the interval they were read in (Stamped false: no stamps)
	known map[uint64]uint64
}

// walkEnvs finishes the environment chains the program left in p at
// their (bpf.Frame.Env), from t's live memory, when what is read now is what
// the sample saw: the GC has not run since the sample (the frame's
// environments are then those it ran in), nor while reading. Frames it
// cannot walk for that reason stay unknown, and count as such; they are
// rare, since such a sample wakes the recorder at once.
func walkEnvs(t *Target, p *bpf.Payload) {
	if p.EnvsLeft == 0 {
		return
	}
	before, err := t.Reader.GCStamp()
	stamped := err == nil
	switch {
	case errors.Is(err, rubystack.ErrNoGCStamps):
		// Nothing tells when an environment is freed: walk it as names
		// are read then, for good.
	case err != nil || before.Compacting || !p.GC.Stamped || !sameInterval(p.GC, before):
		return
	}
	now := bpf.GCStamp{Stamped: stamped, Count: before.Count, Epoch: before.Epoch, Marking: before.Marking}
	if t.envs.known == nil || t.envs.at != now || len(t.envs.known) >= maxKnownEnvs {
		t.envs = envChains{at: now, known: map[uint64]uint64{}}
	}
	left := append([]bpf.Frame(nil), p.Frames...)
	p.WalkEnvs(t.Reader, t.envs.known)
	if !stamped {
		return
	}
	if after, err := t.Reader.GCStamp(); err != nil || after != before {
		// The GC ran while reading: nothing read can be trusted.
		copy(p.Frames, left)
		p.EnvsLeft = 0
		for _, f := range p.Frames {
			if f.Env != 0 {
				p.EnvsLeft++
			}
		}
		t.envs = envChains{}
	}
}

// sameInterval says whether a sample stamped st was taken in the GC
// interval the process is in now: nothing the sample's frames ran in has
// been freed or moved since.
func sameInterval(st bpf.GCStamp, now rubystack.GCStamp) bool {
	interval := bpf.GCStamp{Stamped: true, Count: now.Count, Marking: now.Marking}.Interval()
	return st.Stamped && !st.Compacting && st.Epoch == now.Epoch && st.Interval() == interval
}
