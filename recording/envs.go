package recording

import (
	"errors"

	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/rubystack"
)

// maxKnownEnvs bounds what a target remembers of the environment chains it
// walked; past it, it starts afresh.
const maxKnownEnvs = 4096

// envChains is what a target remembers of the environment chains walked for
// its samples: where each led, and the samples that holds for (the chain
// read in one GC interval holds for that interval; one of old objects, read
// when the GC had settled, for the rest of its epoch).
type envChains struct {
	known  map[uint64]envChain
	before []bpf.Frame // a payload's frames before a walk (scratch)
}

type envChain struct {
	cme  uint64
	span bpf.Span
}

// walkEnvs finishes the environment chains the program left in p at
// their (bpf.Frame.Env), from t's live memory, where what is read now is
// what the sample saw, as a frame's name is proven (see nameFrames): the
// GC has not run since the sample, or every environment and method entry
// on the chain is an old object that sameObjects says was there then. A
// frame whose chain cannot be proven so stays unknown, and counts as such.
func walkEnvs(t *Target, p *bpf.Payload) {
	if p.EnvsLeft == 0 {
		return
	}
	now, err := t.Reader.GCStamp()
	if errors.Is(err, rubystack.ErrNoGCStamps) {
		// Nothing tells when an environment is freed: walk it as names
		// are read then, for good.
		p.WalkEnvs(func(env uint64) (uint64, bool) {
			cme, _, err := t.Reader.EnvMethodEntry(env)
			return cme, err == nil
		})
		return
	}
	if err != nil || now.Compacting || !p.GC.Stamped {
		return
	}
	if t.envs.known == nil || len(t.envs.known) >= maxKnownEnvs {
		t.envs = envChains{known: map[uint64]envChain{}}
	}
	type read struct {
		env uint64
		envChain
	}
	var fresh []read
	t.envs.before = append(t.envs.before[:0], p.Frames...)
	left := p.EnvsLeft
	p.WalkEnvs(func(env uint64) (uint64, bool) {
		if c, ok := t.envs.known[env]; ok && c.span.Covers(p.GC) {
			return c.cme, true
		}
		cme, old, err := t.Reader.EnvMethodEntry(env)
		if err != nil {
			return 0, false
		}
		span := spanFor(p.GC, now, old)
		if !span.Covers(p.GC) && !(old && sameObjects(p.GC, now)) {
			return 0, false
		}
		fresh = append(fresh, read{env, envChain{cme, span}})
		return cme, true
	})
	if len(fresh) == 0 {
		return
	}
	if after, err := t.Reader.GCStamp(); err != nil || after != now {
		// The GC ran while reading: nothing read can be trusted.
		copy(p.Frames, t.envs.before)
		p.EnvsLeft = left
		return
	}
	for _, r := range fresh {
		if r.span != (bpf.Span{}) {
			t.envs.known[r.env] = r.envChain
		}
	}
}
