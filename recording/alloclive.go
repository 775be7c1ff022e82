package recording

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

// What stays alive (Options.Live): each allocation sample's object is
// followed until it dies, its slot read again after GCs. A slot holding an
// object of the same type and class is taken for the same object only when
// that is proven: a slot is reused only after a GC's sweep freed its
// object, a new object starts at age 0, and every GC marking an object
// survives ages it by at least one (up to old, 3). So between two reads P
// and C of a slot, C past a GC's marking:
//
//   - the object P read, alive, is at least min(3, its age at P + the GCs
//     started since P) old: younger, it is another one, and P's is dead;
//   - an object put in the slot since is 0 old while no GC has started
//     since the first sweep that could free P's (for a sample's first
//     read, the first after its allocation: a new object is in a slot
//     swept already); after one it may be any age, even old (a young
//     object marked from an old one is made old at once);
//
// so an object older than 0 read before that second GC is P's. An old
// object is freed only by a major GC: with none since P, it is P's; with
// one, the GC read under (Reader.MajorsAt tells how many started between
// two epochs), an object put in the slot since its sweep is 0 old (a minor
// GC that leaves the heap full is followed at once by a major one, within
// one poll). Anything else (a read after more GCs, a compaction since P,
// which moves objects) proves nothing, and the object is counted unknown,
// not alive.
//
// The slots are read after the GC stamp they are judged under, so a GC
// that starts while they are read would age or replace what they hold
// unseen; and a stamp read as a GC starts (its count bumped, its mode not
// yet set: GCStamp.Starting) reads idle before anything is marked. So a
// pass reads no slot under a starting or marking GC, and reads the stamp
// again after its reads: if it moved, only the deaths a slot shows (free,
// or another type or class) count, and the rest is read at the next poll.
//
// Samples are followed as they are read from the rings (drained at the end
// of each window of allocation sampling: bpf.Sampler.DrainSoon), their
// slots read (all in a few system calls: Reader.ReadSlots) at the first
// poll (every livePoll; liveMarkingPoll while a GC starts or a major GC
// marks) that finds the process's GC count moved and its GC not marking;
// old objects only when a major GC may have freed them. The polls go on
// past the recording's end (each process's stamp then: endLive) until a
// last read after the process's next GC (up to liveFinalWait): an object
// that GC did not mark is garbage, however recent; an old object that a
// major GC after the end, followed at once by another GC, leaves
// unprovable counts as it was at the end, when no major GC had started
// (oldAtEnd). What is alive then (for a process that ended first, at its
// last read), having survived a GC, is written into the recording
// (readback.FeatureAllocLive): the profile of what is in use.

// livePoll is how often each followed process's GC counters are read.
const livePoll = 5 * time.Millisecond

// liveMarkingPoll is how often they are read while a followed process's
// major GC marks, and while the recording's end waits for its GC: the old
// objects are proven only between the end of a major GC's marking and the
// start of the next GC, which may follow at once.
const liveMarkingPoll = 250 * time.Microsecond

// liveFinalWait bounds how long a recording's end waits for the followed
// processes' next GCs (all of them together), which tell what was alive
// then from garbage not yet collected.
const liveFinalWait = time.Second

// maxLiveFollowed bounds the objects followed at once, all processes
// together; past it, new samples are not followed (Summary.LiveNotFollowed).
const maxLiveFollowed = 1 << 17

// liveObject is one followed allocation sample's object.
type liveObject struct {
	key        payload.AllocKey
	klass, typ uint64  // of what its slot held, once read (typ 0: not yet)
	age        int     // at the last proof
	proof      gcPoint // where the GC was at the last proof
	// survived: proven through a GC by its mark bit, not its age (an
	// object without write barriers, which the GC never ages).
	survived bool
}

// throughGC says whether o's object was proven alive through a GC: older
// than new, or marked by one (survived).
func (o *liveObject) throughGC() bool { return o.age > 0 || o.survived }

// gcPoint is where a process's GC was at a proof.
type gcPoint struct {
	count, epoch uint64
	idle         bool // neither marking nor sweeping
	// safe: no sweep under way at this point can free the object: it was
	// just allocated (in a slot swept already), or marked by the GC whose
	// sweep it is (its mark bit, where the layout tells it; its age rose in
	// that GC's marking; old, in a minor GC).
	safe       bool
	compacts   uint64
	compacting bool
	// majors: how many major GCs had started by epoch (majorsKnown: the
	// Reader saw that epoch in a read it trusts).
	majors      uint64
	majorsKnown bool
}

// sweepMayFree says whether the sweep of the GC p is in may still free an
// object proven alive at p: p is in a GC, and not safe.
func (p gcPoint) sweepMayFree() bool { return !p.idle && !p.safe }

// liveProcess is what is known of one followed process.
type liveProcess struct {
	objects []*liveObject
	last    rubystack.GCStamp  // at the last read of its slots
	read    bool               // last holds a stamp
	fresh   bool               // objects followed since: read them at the next poll
	ended   bool               // its slots can no longer be read
	end     *rubystack.GCStamp // its GC when the recording ended (endLive)
}

type allocLive struct {
	procs    map[int]*liveProcess
	followed int
}

// followAlloc starts following the object of allocation sample p as
// soon as it is read from the ring (s.mu held): its slot must be read
// within three GCs of the allocation for its age to tell it from a
// successor (the recorder drains the rings at the end of each window of
// allocation sampling, bpf.Sampler.DrainSoon). What the slot holds then,
// proven to be it, gives the object's type and class.
func (s *session) followAlloc(p *payload.Payload) {
	if !s.opts.Live || p.AllocSlot == 0 {
		return
	}
	if !p.GC.Stamped || p.GC.Compacting {
		s.sum.LiveUnknown++ // no GC stamp to start the proofs from
		return
	}
	l := &s.allocLive
	if l.followed >= maxLiveFollowed {
		s.sum.LiveNotFollowed++
		return
	}
	if l.procs == nil {
		l.procs = map[int]*liveProcess{}
	}
	pr := l.procs[int(p.PID)]
	if pr == nil {
		pr = &liveProcess{}
		l.procs[int(p.PID)] = pr
	}
	t := s.targets[int(p.PID)]
	if pr.ended || t == nil {
		s.sum.LiveUnknown++
		return
	}
	compacts, _ := t.Reader.CompactCount()
	majors, known := t.Reader.MajorsAt(p.GC.Epoch)
	// A new object sits in a slot swept already, which the GC under way
	// does not sweep again; except during a marking, which may leave it
	// unmarked for that GC's sweep to free.
	pr.fresh = true
	pr.objects = append(pr.objects, &liveObject{
		key: payload.AllocKey{PID: p.PID, TID: p.TID, Window: p.AllocWindow, Seq: p.AllocSeq, Slot: p.AllocSlot},
		proof: gcPoint{count: p.GC.Count, epoch: p.GC.Epoch, safe: !p.GC.Marking, compacts: compacts,
			majors: majors, majorsKnown: known}})
	l.followed++
	s.sum.LiveFollowed++
}

// watchLive reads the followed objects' slots after each GC until ctx
// ends: past the recording's end, until its last read (checkLive final).
func (s *session) watchLive(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	wait := time.NewTimer(livePoll)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		s.mu.Lock()
		marking := s.checkLive(false)
		s.mu.Unlock()
		if marking {
			wait.Reset(liveMarkingPoll)
		} else {
			wait.Reset(livePoll)
		}
	}
}

// checkLive reads the slots of each followed process whose GC has moved
// on since they were last read (s.mu held), and says whether one of them
// is in a GC's marking. final: the recording ends, and each process's
// next GC is waited for, a little.
func (s *session) checkLive(final bool) (marking bool) {
	// One wait for every process: a recording of many ends in a second.
	deadline := time.Now().Add(liveFinalWait)
	for pid, p := range s.allocLive.procs {
		if p.ended || len(p.objects) == 0 {
			continue
		}
		t := s.targets[pid]
		if t == nil || s.gone[pid] {
			p.ended = true
			continue
		}
		c, err := t.Reader.GCStamp()
		if final && err == nil && p.end == nil {
			end := c
			p.end = &end
		}
		for err == nil {
			if final {
				// What the next GC after the end marks was alive when the
				// recording ended; what it leaves unmarked stays young,
				// and reads as dead.
				for err == nil && (c.Count == p.end.Count || c.Marking || c.Starting) && time.Now().Before(deadline) {
					time.Sleep(liveMarkingPoll)
					c, err = t.Reader.GCStamp()
				}
				if err != nil {
					break
				}
			}
			// A pass whose reads a GC overtook is tried again at the end,
			// while the wait lasts.
			if !s.checkProcess(t.Reader, p, c, final) || !final || !time.Now().Before(deadline) {
				break
			}
			c, err = t.Reader.GCStamp()
		}
		if errors.Is(err, rubystack.ErrNoProcess) {
			p.ended = true
		}
		marking = marking || err == nil && (c.Marking || c.Starting)
	}
	return marking
}

// endLive notes where each followed process's GC is as the recording ends
// (s.mu held): its objects are followed on until the final read (checkLive),
// which tells what was alive then.
func (s *session) endLive() {
	for pid, p := range s.allocLive.procs {
		if t := s.targets[pid]; t != nil && !p.ended && !s.gone[pid] {
			if c, err := t.Reader.GCStamp(); err == nil {
				p.end = &c
			}
		}
	}
}

// checkProcess reads the slots of p's followed objects at c, if its GC has
// moved on since they were last read, and applies what they say unless a
// GC started while they were read (moved: then they are read again at the
// next poll). final: the recording's last read.
func (s *session) checkProcess(r *rubystack.Reader, p *liveProcess, c rubystack.GCStamp, final bool) (moved bool) {
	// Read after each GC's marking, and once more when the sweep last
	// read under has ended: what it did not free is past it.
	swept := p.read && c.Idle && !p.last.Idle && c.Count == p.last.Count
	if c.Marking || c.Starting || c.Compacting || !final && p.read && c.Count == p.last.Count && !p.fresh && !swept {
		return false
	}
	p.fresh = false
	compacts, _ := r.CompactCount()
	now := gcPoint{count: c.Count, epoch: c.Epoch, idle: c.Idle, compacts: compacts}
	now.majors, now.majorsKnown = r.MajorsAt(c.Epoch)
	// Proofs that need no read hold whatever happens next; the others
	// wait for their reads, all in a few system calls, so that a GC seldom
	// starts among them.
	var judged []liveJudgement
	var addrs []uint64
	for i, o := range p.objects {
		next := *o
		if provenUnread(&next, now, final) {
			*o = next
			continue
		}
		judged = append(judged, liveJudgement{index: i, next: next})
		addrs = append(addrs, o.key.Slot)
	}
	if len(judged) == 0 {
		p.last, p.read = c, true
		return false
	}
	slots, ok := make([]rubystack.SlotObject, len(addrs)), make([]bool, len(addrs))
	err := r.ReadSlots(addrs, slots, ok)
	for k := range judged {
		j := &judged[k]
		j.verdict = liveUnproven
		if err == nil && ok[k] {
			j.verdict = judgeLive(&j.next, now, slots[k], slots[k].Type(r))
		}
	}
	// What the reads saw holds at now only if no GC started, nor
	// compacted, while they ran. (Idle, then not at the same count: c was
	// read as a GC started, before it set its mode.)
	after, err := r.GCStamp()
	compactsAfter, _ := r.CompactCount()
	compactedSince := compactsAfter != compacts
	moved = err != nil || after.Count != c.Count || after.Marking || after.Starting || after.Compacting ||
		c.Idle && !after.Idle || compactedSince
	kept := p.objects[:0]
	for i, o := range p.objects {
		if len(judged) == 0 || judged[0].index != i {
			kept = append(kept, o) // proven unread
			continue
		}
		j := &judged[0]
		judged = judged[1:]
		v := j.verdict
		switch {
		case !moved:
		case v != liveGone:
			// Too late to tell: read it again. (A slot that no longer
			// holds the object tells of its death at any time; an age,
			// only after the marking it was read under.)
			kept = append(kept, o)
			continue
		case compactedSince:
			v = liveUnproven // moved, perhaps, rather than freed
		}
		if v == liveUnproven && p.end != nil && oldAtEnd(o, *p.end) {
			// A major GC after the end, overtaken by the next GC before
			// its old objects were read, tells nothing of them: they are
			// as they were when the recording ended.
			kept = append(kept, o)
			continue
		}
		switch v {
		case liveProven:
			*o = j.next
			kept = append(kept, o)
		case liveDead, liveGone:
			s.sum.LiveDied++
			s.allocLive.followed--
		case liveUnproven:
			s.sum.LiveUnknown++
			s.allocLive.followed--
		}
	}
	clear(p.objects[len(kept):])
	p.objects = kept
	if moved {
		p.fresh = true
		return true
	}
	p.last, p.read = c, true
	return false
}

// liveJudgement is what one pass of checkProcess read of a followed
// object, applied once the pass knows its reads hold.
type liveJudgement struct {
	index   int        // in liveProcess.objects
	next    liveObject // the object as the verdict leaves it
	verdict liveVerdict
}

type liveVerdict int

const (
	liveProven   liveVerdict = iota // the same object, alive
	liveDead                        // its slot's object is too young to be it
	liveUnproven                    // the slot's object may or may not be it
	liveGone                        // dead: its slot is free, or holds another type or class
)

// provenUnread says whether o's object is proven alive at now, a point
// after a GC's marking, without reading its slot (the proof then moves
// o's to now); else its slot must be read (judgeLive). final: the
// recording ends, and a slot the GC of o's last proof may have swept since
// is read though no GC started since.
func provenUnread(o *liveObject, now gcPoint, final bool) bool {
	p := o.proof
	inGC := p.sweepMayFree()
	if now.count < p.count || now.count == p.count && !(inGC && (final || now.idle)) {
		return true // no GC since, or its sweep still under way: read at the next
	}
	compacted := p.compacting || now.compacts != p.compacts
	if o.age == rubystack.MaxAge && now.epoch == p.epoch && !(p.epoch == p.count && inGC) && !compacted {
		// Old, and no major GC could have freed it since: not read. The
		// sweep under way, a minor GC's, frees no old object.
		now.safe = now.idle || now.epoch != now.count
		o.proof = now
		return true
	}
	return false
}

// judgeLive says whether slot, read at now and of type typ, holds o's
// object, by the bounds above; a proof moves o's to now.
func judgeLive(o *liveObject, now gcPoint, slot rubystack.SlotObject, typ uint64) liveVerdict {
	p := o.proof
	inGC := p.sweepMayFree()
	compacted := p.compacting || now.compacts != p.compacts
	// Its first read (unseen: the allocation's slot was not read yet)
	// takes whatever object is there, if its age proves it the one.
	unseen := o.typ == 0
	same := slot.Flags != 0 && (unseen || typ == o.typ && slot.Klass == o.klass)
	switch {
	case compacted:
		return liveUnproven // moved, perhaps, and another moved in
	case !same:
		return liveGone
	case slot.WBKnown && slot.WBUnprotected:
		return judgeUnaged(o, now, slot, typ)
	case o.survived && !slot.WBKnown:
		return liveUnproven // without write barriers before: its age tells nothing
	case !slot.AgeKnown:
		return liveUnproven
	}
	// The bounds above, in GCs started since p (now is past its marking).
	started := int(now.count - p.count)
	youngest := min(rubystack.MaxAge, o.age+started) // o, alive
	// GCs started since the first sweep that could free o: an object put
	// in its slot since is 0 old while none has.
	since := started - 1
	if inGC {
		since = started // p's GC may have freed o
	}
	switch {
	case slot.Age < youngest:
		return liveDead
	case since <= 0 && slot.Age > 0:
		// Older than anything put there since.
	case o.age == rubystack.MaxAge && now.epoch == p.epoch && !(p.epoch == p.count && inGC):
		// Old, and no major GC since.
	case o.age == rubystack.MaxAge && onlyMajorIsNow(p, now) && !(p.epoch == p.count && inGC) && slot.Age > 0:
		// Old, and the one major GC since is the one read under: an
		// object put in its slot since that GC's sweep is 0 old.
	default:
		return liveUnproven
	}
	now.safe = now.idle || slot.Marked || slot.Age == rubystack.MaxAge && now.epoch != now.count ||
		slot.Age > o.age && started == 1 && !inGC
	o.age, o.proof = slot.Age, now
	if unseen {
		o.typ, o.klass = typ, slot.Klass
	}
	return liveProven
}

// judgeUnaged judges, by its mark bit, an object without write barriers,
// which the GC never ages (nor, if it had been old, keeps old). A slot's
// mark bit is set, at a read after the marking of the GC now is in (reads
// are never made under one), for what that marking reached, until the
// sweep reaches its page; from then on, for an uncollectible object
// alone (old, or, up to Ruby 3.2, without write barriers and referenced
// from an old one), which only a major GC that does not mark it frees. An
// object put in the slot after a sweep freed o's is neither. So with that
// GC the first since p whose sweep could free o's (one GC started since
// p, idle or safe; or none, and p under its sweep), a marked slot holds
// o's object, alive through it. An unmarked one proves nothing: its page
// may have been swept (and from Ruby 3.3, a young object without write
// barriers is never uncollectible).
func judgeUnaged(o *liveObject, now gcPoint, slot rubystack.SlotObject, typ uint64) liveVerdict {
	p := o.proof
	inGC := p.sweepMayFree()
	started := now.count - p.count
	if !slot.MarkKnown || !slot.Marked || !(started == 1 && !inGC || started == 0 && inGC) {
		return liveUnproven
	}
	now.safe = true // marked by the GC whose sweep it may be
	if o.typ == 0 {
		o.typ, o.klass = typ, slot.Klass
	}
	o.age, o.proof, o.survived = 0, now, true
	return liveProven
}

// oldAtEnd says whether o's object, as last proven, was old and not freed
// when the recording ended at end: no major GC started between its proof
// and then, and the one of its proof, if major, had swept it already.
func oldAtEnd(o *liveObject, end rubystack.GCStamp) bool {
	p := o.proof
	inGC := p.sweepMayFree()
	return o.age == rubystack.MaxAge && p.count <= end.Count && p.epoch == end.Epoch &&
		!(p.epoch == p.count && inGC) && !p.compacting
}

// onlyMajorIsNow says whether exactly one major GC started between p and
// now, and it is the GC now is in (past its marking).
func onlyMajorIsNow(p, now gcPoint) bool {
	return p.majorsKnown && now.majorsKnown && now.majors == p.majors+1 && now.epoch == now.count
}

// liveRecords is what the recording keeps of the objects alive at its end
// (s.mu held): each one that survived a GC (throughGC), as the AllocKey of
// its sample, 24 bytes (pid, tid, window, seq: u32; slot: u64), after a
// header of the counts (readback.FeatureAllocLive).
func (s *session) liveRecords() []byte {
	var keys []payload.AllocKey
	young := uint64(0)
	for _, p := range s.allocLive.procs {
		for _, o := range p.objects {
			if !o.throughGC() {
				young++
				continue
			}
			keys = append(keys, o.key)
		}
	}
	slices.SortFunc(keys, func(a, b payload.AllocKey) int {
		switch {
		case a.PID != b.PID:
			return int(a.PID) - int(b.PID)
		case a.TID != b.TID:
			return int(a.TID) - int(b.TID)
		case a.Window != b.Window:
			return int(a.Window) - int(b.Window)
		case a.Seq != b.Seq:
			return int(a.Seq) - int(b.Seq)
		}
		return 0
	})
	s.sum.LiveAlive, s.sum.LiveYoung = uint64(len(keys)), young
	b := binary.LittleEndian.AppendUint32(nil, liveFormat)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for _, n := range []uint64{s.sum.LiveFollowed, s.sum.LiveAlive, young, s.sum.LiveDied, s.sum.LiveUnknown, s.sum.LiveNotFollowed} {
		b = binary.LittleEndian.AppendUint64(b, n)
	}
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint32(b, k.PID)
		b = binary.LittleEndian.AppendUint32(b, k.TID)
		b = binary.LittleEndian.AppendUint32(b, k.Window)
		b = binary.LittleEndian.AppendUint32(b, k.Seq)
		b = binary.LittleEndian.AppendUint64(b, k.Slot)
	}
	return b
}

// liveFormat is the version of FeatureAllocLive's layout.
const liveFormat = 1

// LiveView lets the caller of a live recording (Options.Stacks) that
// follows its objects (Options.Live) ask, while it runs, which of them are
// alive: the agent's in-use profiles.
type LiveView struct {
	mu sync.Mutex
	s  *session // while the recording runs
}

func (v *LiveView) attach(s *session) {
	v.mu.Lock()
	v.s = s
	v.mu.Unlock()
}

// Objects calls fn with every object the recording follows now: its
// process, the allocation sample's object (merge.Stack.Object) and whether
// it is proven alive having survived a GC (else not proven yet: too young,
// or not read since). It says false, calling nothing, when no recording
// that follows objects is running. fn must not call into the recording.
func (v *LiveView) Objects(fn func(pid int, o merge.AllocObject, alive bool)) bool {
	v.mu.Lock()
	s := v.s
	v.mu.Unlock()
	if s == nil || !s.opts.Live {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, p := range s.allocLive.procs {
		if p.ended {
			continue
		}
		for _, o := range p.objects {
			k := o.key
			fn(pid, merge.AllocObject{TID: k.TID, Window: k.Window, Seq: k.Seq, Slot: k.Slot}, o.throughGC())
		}
	}
	return true
}
