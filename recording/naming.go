package recording

import (
	"errors"
	"fmt"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// Naming a sample's Ruby frames as the recorder reads it: only the frames
// its thread's previous sample did not share are looked up (newFrames), the
// symbol table names them where a name is proven (SymbolTable.Resolve), and
// the ids of the names go into the sample's payload (nameSample).

// threadKey is a thread of a target process.
type threadKey struct{ pid, tid, gen uint32 }

// The layout is checked before attaching; while recording, the frames the
// BPF walker brings are checked again as they are symbolized. A target
// whose distinct frames are mostly not readable as Ruby frames is read
// through a layout that does not fit (or its memory is being torn apart):
// it is no longer sampled, and the user is told.
const (
	plausibleMinFrames = 64
	plausibleMaxShare  = 0.5
)

// checkPlausible counts a target's newly symbolized frames (s.mu held).
func (s *session) checkPlausible(t *Target, seen, implausible int) {
	t.framesSeen += seen
	t.framesImplausible += implausible
	if t.dropped || t.framesSeen < plausibleMinFrames ||
		float64(t.framesImplausible) <= plausibleMaxShare*float64(t.framesSeen) {
		return
	}
	t.dropped = true
	s.targetExited(t.PID) // as if it had exited: no more samples, and the recording may end
	s.sum.Dropped = append(s.sum.Dropped, t.PID)
	if s.opts.Warn != nil {
		fmt.Fprintf(s.opts.Warn, "rubyperf: pid %d (%s): stopped sampling it: %d of %d distinct frames could not be read "+
			"as Ruby frames through layout %s; its samples so far keep them as [unknown]\n",
			t.PID, ProcessName(t.PID), t.framesImplausible, t.framesSeen, t.Reader.Layout.Source)
	}
}

// noGCStamps says, once per target, that its names are not checked.
func (s *session) noGCStamps(t *Target) {
	if t.NoGCStamps != nil && !t.sharesProcess {
		line := fmt.Sprintf("pid %d (%s): no GC stamps (%v): a frame whose code is freed and replaced while "+
			"recording may keep the name of the code there before; debug info for its Ruby (--debug-file, "+
			"debuginfod) removes the doubt", t.PID, ProcessName(t.PID), t.NoGCStamps)
		if len(s.sum.NoGCStamps) < maxEvents {
			s.sum.NoGCStamps = append(s.sum.NoGCStamps, line)
		}
		if s.opts.Warn != nil && len(s.sum.NoGCStamps) == 1 {
			fmt.Fprintf(s.opts.Warn, "rubyperf: %s\n", line)
		}
	}
}

// decodeSample decodes a sample's payload (raw, as recorded) into
// s.payload. A thread's consecutive samples share all but a few leaf
// frames, and decoding each frame of each sample was a fifth of the
// recorder's cost at 200 frames: of a sample of the thread whose sample was
// decoded and named last, the outermost frames whose bytes are that
// sample's are taken as they were decoded (payload.DecodeFrames).
func (s *session) decodeSample(raw []byte) error {
	p := &s.payload
	s.compared.valid = false
	d, err := payload.DecodeHeader(p, raw)
	if err != nil {
		s.decodedNamed = false
		return err
	}
	k := threadKey{p.PID, p.TID, p.Gen}
	known := 0
	if t, ok := s.targets[int(p.PID)]; ok && t.Config.Gen == p.Gen && s.decodedNamed && s.decodedFor == k {
		// The same bytes decode alike under the same OldStale; the
		// previous sample's walked environments (if any) left it
		// unnamed as decoded (takeSample).
		if prev, ok := s.lastFrames[k]; ok && prev.stale == (p.Flags&payload.OldStale != 0) {
			known = payload.SharedOutermost(prev.frames, d.Bytes)
			s.compared.valid, s.compared.shared = true, known
		}
	}
	s.frames, s.decodedFor, s.decodedNamed = d, k, false
	s.decoded = payload.DecodeFrames(p, d, s.decoded, known)
	if known > 0 && p.EnvsLeft > 0 {
		// Its environments are walked: it shares nothing (newFrames),
		// and its frames are named afresh, from their decoded iseqs.
		s.decoded = payload.DecodeFrames(p, d, s.decoded, 0)
		known = 0
	}
	s.decodedKnown = known
	return nil
}

// takeSample names the Ruby frames of a sample (p, its payload, decoded
// from smp.Raw) in smp.Raw, and gives smp the period p stands for.
func (s *session) takeSample(p *payload.Payload, smp *perfdata.Sample) {
	// A sample of an image that has exec'd since is not read through
	// the new one: its frames stay unnamed.
	if t, ok := s.targets[int(p.PID)]; ok && t.Config.Gen == p.Gen {
		if t.gcUnchecked {
			s.checkGC(t)
		}
		walked := p.EnvsLeft > 0
		walkEnvs(t, p)
		frames := s.frames.Bytes // decodeSample's
		if len(frames) != len(p.Frames)*payload.FrameSize {
			frames = nil // shares nothing, and nothing shares it
		}
		unseen := s.newFrames(p, frames, walked)
		if shared := len(p.Frames) - len(unseen.Frames); shared < s.decodedKnown {
			// Frames taken as the sample before had them, named, that
			// are looked up again (another GC interval): decoded afresh.
			// (Not walked: decodeSample took none from a walked sample.)
			s.decoded = payload.DecodeFrames(p, s.frames, s.decoded, shared)
		}
		ids, added, bad := s.symtab.Resolve(t.Reader, unseen, s.ids[:0])
		if len(added) > 0 && !s.sampler.Sampled(t.PID, t.Config.Gen) {
			// It exec'd before its COMM record was read: what was
			// just read may be the new program's. Unnamed is right.
			s.symtab.Forget(p.PID, p.Gen, added)
			ids = s.symtab.NameIDs(unseen, ids)
			added, bad = nil, 0
		}
		s.checkPlausible(t, len(added), bad)
		if len(added) > 0 {
			// Their later samples may wait in the batched rings. A
			// failure only keeps sending them to the urgent ones.
			s.sampler.MarkNamed(p.PID, p.Gen, added)
		}
		named := s.nameSample(p, smp.Raw, ids) == nil
		// The next sample of its thread may take its frames as they are
		// now: named, none walked. Unnamed, the frames decodeSample took
		// from the sample before hold that one's names: decoded afresh.
		s.decodedNamed = named && !walked
		if !named && !walked {
			s.decoded = payload.DecodeFrames(p, s.frames, s.decoded, 0)
		}
		s.nameLabels(t, p, smp.Raw)
	} else {
		s.countUnnamed(p)
	}
	if !p.Thread.OffCPU && perfdata.SetSamplePeriod(s.raw, &s.attr, p.Period) == nil {
		smp.Period = p.Period
	}
}

// checkGC checks the GC counters of a target attached before its first GC,
// once one has run. Counters that do not agree turn its GC stamps off: its
// later samples are named as a Ruby's without stamps are, and the recording
// says its names are not checked (its earlier samples keep the names they
// were given, read while the counters could not be told wrong).
func (s *session) checkGC(t *Target) {
	err := t.Reader.CheckGC()
	if errors.Is(err, rubystack.ErrGCNotRun) {
		return
	}
	t.gcUnchecked = false
	if err == nil {
		return
	}
	t.Config.GcSpan = 0
	if rerr := s.sampler.Reconfigure(t.PID, t.Config); rerr != nil {
		err = fmt.Errorf("%w (and %v)", err, rerr)
	}
	t.Reader.NoGCStamps()
	t.NoGCStamps = err
	s.noGCStamps(t)
}

// lastSample is what newFrames keeps of a thread's previous sample.
type lastSample struct {
	frames []byte     // its frames as the program wrote them (payload.FrameBytes)
	ids    []uint64   // the ids of the names its frames had
	kinds  []nameKind // and what kind of name each is
	gc     payload.GCStamp
	stale  bool // its payload had OldStale: its frames' old-generation bits meant nothing
}

// newFrames is p with only the frames above the part its thread's previous
// sample shared (in s.unseen, overwritten by the next call), and remembers
// p's frames for the next. frames are p's as the program wrote them
// (payload.FrameBytes): two frames whose bytes are alike decode alike, so
// the shared part is found by comparing bytes, many frames at a time.
// walked: the recorder walked on environment chains the program left
// (payload.WalkEnvs) to give p's frames their method entries, which the
// bytes do not hold.
func (s *session) newFrames(p *payload.Payload, frames []byte, walked bool) *payload.Payload {
	k := threadKey{p.PID, p.TID, p.Gen}
	compared := s.compared
	s.compared.valid = false
	if s.lastFrames == nil || len(s.lastFrames) >= maxLastFrames || s.maxLastHeld > 0 && s.lastHeld+len(p.Frames) > s.maxLastHeld {
		s.lastFrames, s.lastHeld = map[threadKey]lastSample{}, 0
		compared.valid = false
	}
	prev := s.lastFrames[k]
	s.lastHeld += max(len(p.Frames)-cap(prev.frames)/payload.FrameSize, 0)
	shared := 0
	// Names hold for GC intervals: frames shared with a sample of another
	// interval are looked up again. A frame whose environment the recorder
	// walked may lead elsewhere with the same bytes: such a sample shares
	// nothing.
	stale := p.Flags&payload.OldStale != 0
	if prev.gc.Stamped == p.GC.Stamped && prev.gc.Epoch == p.GC.Epoch && prev.gc.Interval() == p.GC.Interval() &&
		!p.GC.Compacting && len(prev.ids)*payload.FrameSize == len(prev.frames) && len(prev.kinds) == len(prev.ids) &&
		prev.stale == stale && !walked {
		if compared.valid {
			shared = compared.shared // decodeSample compared them
		} else {
			shared = payload.SharedOutermost(prev.frames, frames)
		}
	}
	// The names of the shared frames, before prev's storage is reused.
	s.sharedIDs = append(s.sharedIDs[:0], prev.ids[len(prev.ids)-shared:]...)
	s.sharedKinds = append(s.sharedKinds[:0], prev.kinds[len(prev.kinds)-shared:]...)
	s.lastFrames[k] = lastSample{frames: append(prev.frames[:0], frames...), ids: prev.ids, kinds: prev.kinds, gc: p.GC, stale: stale}
	s.unseen = payload.Payload{PID: p.PID, TID: p.TID, Gen: p.Gen, Flags: p.Flags, GC: p.GC, Frames: p.Frames[:len(p.Frames)-shared]}
	return &s.unseen
}

// nameSample writes into the sample's payload (raw, as recorded) the ids of
// the names its frames have for it: those Resolve gave its unseen frames,
// then the shared ones' as the thread's previous sample had them. Each
// sample thus carries the names proven for it.
func (s *session) nameSample(p *payload.Payload, raw []byte, ids []uint64) error {
	// The kinds of the shared frames' names are the previous sample's: a
	// name's kind is the table's look-up of its id, a cache miss a frame.
	kinds := s.kinds[:0]
	for _, id := range ids {
		kinds = append(kinds, kindOf(s.symtab.NameKind(id)))
	}
	ids = append(ids, s.sharedIDs...)
	kinds = append(kinds, s.sharedKinds...)
	s.ids, s.kinds = ids, kinds
	s.countNames(len(ids), func(i int) (unknown, replaced bool) { return kinds[i] == kindUnknown, kinds[i] == kindReplaced })
	// Per frame a map lookup: only once the budget has cut a name.
	if s.symtab.GivenOverBudget() {
		for _, id := range ids {
			if s.symtab.OverBudget(id) {
				s.sum.FramesOverBudget++
			}
		}
	}
	k := threadKey{p.PID, p.TID, p.Gen}
	if last, ok := s.lastFrames[k]; ok {
		last.ids = append(last.ids[:0], ids...)
		last.kinds = append(last.kinds[:0], kinds...)
		s.lastFrames[k] = last
	}
	return payload.NameFrames(raw, p, ids) // a payload it cannot read stays as it was: unnamed
}

// nameKind is what kind of name a frame has, as the summary counts them.
type nameKind uint8

const (
	kindNamed nameKind = iota
	kindUnknown
	kindReplaced
)

func kindOf(unknown, replaced bool) nameKind {
	switch {
	case unknown:
		return kindUnknown
	case replaced:
		return kindReplaced
	}
	return kindNamed
}

// countUnnamed counts in the summary the frames of a sample the recorder
// does not name (its image exec'd since), as a reader will read them: by
// their keys, in the table as it stands (s.mu held).
func (s *session) countUnnamed(p *payload.Payload) {
	s.countNames(len(p.Frames), func(i int) (unknown, replaced bool) {
		f := p.Frames[i]
		info, named, ok := s.symtab.Lookup(symtab.Key(p.PID, p.Gen, f), p.GC)
		return f.Error || !named || ok && info.Unknown, !ok
	})
}

// countNames counts in the summary a sample's n frames without a name, by
// kind (unknown first), and the sample if it has any (s.mu held).
func (s *session) countNames(n int, kind func(i int) (unknown, replaced bool)) {
	unnamed := false
	for i := range n {
		switch unknown, replaced := kind(i); {
		case unknown:
			s.sum.UnknownFrames++
		case replaced:
			s.sum.FramesNotNamed++
		default:
			continue
		}
		unnamed = true
	}
	if unnamed {
		s.sum.SamplesNotNamed++
	}
}
