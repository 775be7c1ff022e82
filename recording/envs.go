package recording

import (
	"errors"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// maxKnownEnvs bounds what a target remembers of the environment chains it
// walked; past it, it starts afresh.
const maxKnownEnvs = 4096

// envChains is what a target remembers of the environment chains walked for
// its samples, by the environment the program left each at.
type envChains struct {
	known map[uint64]envChain
}

// envChain is where a chain led, and for which samples: those span covers
// (the chain read in one GC interval holds for that interval; one of old
// objects, read when the GC had settled, for the rest of its epoch), and
// those the run of old checks of its first environment takes (see
// oldCheck: the first environment keeps the rest of the chain alive).
type envChain struct {
	cme  uint64
	span payload.Span
	run  symtab.OldRun // run.lo.st not Stamped: none
}

// envWalk is what walkEnvs found for one environment of a sample.
type envWalk struct {
	cme    uint64
	old    bool // read now, of old objects only
	read   bool // read now (else from what was known)
	proven bool
	span   payload.Span
}

// walkEnvs finishes the environment chains the program left in p at
// their (payload.Frame.Env), from t's live memory, where what is read now is
// what the sample saw, as a frame's name is proven (see nameFrames): the
// GC has not run since the sample, or every environment and method entry
// on the chain is an old object that the program or a read found the same
// since (linked). A frame whose chain cannot be proven so stays unknown,
// and counts as such.
func walkEnvs(t *Target, p *payload.Payload) {
	if p.EnvsLeft == 0 {
		return
	}
	now, err := t.Reader.GCStamp()
	if errors.Is(err, rubystack.ErrNoGCStamps) {
		// Nothing tells when an environment is freed: walk it as names
		// are read then, for good.
		p.WalkEnvs(func(f payload.Frame) (uint64, bool) {
			cme, _, err := t.Reader.EnvMethodEntry(f.Env)
			return cme, err == nil
		})
		return
	}
	if err != nil || now.Compacting || !p.GC.Stamped {
		return
	}
	if t.envs.known == nil || len(t.envs.known) >= maxKnownEnvs {
		t.envs.known = map[uint64]envChain{}
	}
	walks := map[uint64]envWalk{}
	reads := 0
	end := t.Reader.Batch()
	for _, f := range p.Frames {
		if f.Env == 0 {
			continue
		}
		if _, ok := walks[f.Env]; ok {
			continue
		}
		c, ok := t.envs.known[f.Env]
		switch {
		case ok && c.span.Covers(p.GC):
			walks[f.Env] = envWalk{cme: c.cme, proven: true}
			continue
		case ok && f.EnvOld && c.run.Started() && c.run.Extend(symtab.SampleCheck(p.GC, t.Reader)):
			t.envs.known[f.Env] = c // the same objects since: no read
			walks[f.Env] = envWalk{cme: c.cme, proven: true}
			continue
		}
		cme, old, err := t.Reader.EnvMethodEntry(f.Env)
		if err == nil {
			walks[f.Env] = envWalk{cme: cme, old: old, read: true, span: symtab.SpanFor(p.GC, now, old)}
			reads++
		}
	}
	end()
	if reads > 0 {
		after, err := t.Reader.GCStamp()
		read, valid := symtab.ReadBetween(now, after, t.Reader)
		valid = valid && err == nil
		moved := after != now
		for _, f := range p.Frames {
			w, ok := walks[f.Env]
			if !ok || !w.read || w.proven {
				continue
			}
			if !valid {
				delete(walks, f.Env)
				continue
			}
			w.proven = !moved && w.span.Covers(p.GC) ||
				w.old && symtab.ProvenFor(p.GC, f.EnvOld, read, t.Reader)
			c := envChain{cme: w.cme}
			if !moved {
				c.span = w.span
			}
			if w.old {
				c.run = symtab.RunFrom(read)
				if k, ok := t.envs.known[f.Env]; ok && k.cme == w.cme && k.run.Started() && k.run.Extend(read) {
					c.run = k.run
				}
			}
			if c.span != (payload.Span{}) || c.run.Started() {
				t.envs.known[f.Env] = c
			}
			walks[f.Env] = w
		}
	}
	p.WalkEnvs(func(f payload.Frame) (uint64, bool) {
		w, ok := walks[f.Env]
		return w.cme, ok && w.proven
	})
}
