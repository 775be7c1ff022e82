package agent

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/recording"
)

// maxInUse bounds the allocation samples whose objects the agent keeps
// the stacks of (as many as a recording follows at once), and
// maxInUseFrames the frames of their distinct stacks.
const (
	maxInUse       = 1 << 17
	maxInUseFrames = 1 << 20
)

// inUse keeps, for each allocation sample whose object the recording
// follows (recording.Options.Live), what an in-use profile says of it: its
// stack (shared by the samples of one stack), thread and weight, until the
// recording stops following it.
type inUse struct {
	objects map[inUseKey]*inUseObject
	stacks  map[string]*inUseStack
	frames  int    // in stacks
	gen     uint64 // cuts so far
	key     []byte
}

type inUseKey struct {
	pid int
	obj merge.AllocObject
}

type inUseObject struct {
	stack          *inUseStack
	thread         string
	labels         []merge.Label // the object's class among them
	process        recording.Process
	objects, bytes uint64
	gen            uint64 // the cut it was added before
}

type inUseStack struct {
	key    string
	frames []merge.Frame
	refs   int
}

func newInUse() *inUse {
	return &inUse{objects: map[inUseKey]*inUseObject{}, stacks: map[string]*inUseStack{}}
}

// add keeps st, an allocation sample of process p, until its object is no
// longer followed; past the bounds it is not kept.
func (u *inUse) add(st merge.Stack, p *recording.Process) {
	k := inUseKey{st.PID, st.Object}
	if _, ok := u.objects[k]; ok || len(u.objects) >= maxInUse || st.Object.Slot == 0 {
		return
	}
	key := u.key[:0]
	for _, f := range st.Frames {
		key = binary.LittleEndian.AppendUint32(key, uint32(f.Kind))
		key = append(key, f.Name...)
		key = append(key, 0)
		key = append(key, f.File...)
		key = binary.LittleEndian.AppendUint64(key, uint64(f.Line))
		key = binary.LittleEndian.AppendUint64(key, f.Addr)
		key = append(key, f.BuildID...)
		key = append(key, 0)
	}
	u.key = key
	s, ok := u.stacks[string(key)]
	if !ok {
		if u.frames+len(st.Frames) > maxInUseFrames {
			return
		}
		s = &inUseStack{key: string(key), frames: slices.Clone(st.Frames)}
		for i := range s.frames {
			f := &s.frames[i]
			f.Name, f.File, f.BuildID = strings.Clone(f.Name), strings.Clone(f.File), strings.Clone(f.BuildID)
		}
		u.stacks[s.key] = s
		u.frames += len(s.frames)
	}
	s.refs++
	o := &inUseObject{stack: s, thread: strings.Clone(st.Comm), process: *p, objects: st.Period,
		bytes: st.AllocBytes, gen: u.gen}
	for _, l := range st.Labels {
		o.labels = append(o.labels, merge.Label{Key: strings.Clone(l.Key), Value: strings.Clone(l.Value)})
	}
	u.objects[k] = o
}

// drop forgets the object of k.
func (u *inUse) drop(k inUseKey, o *inUseObject) {
	delete(u.objects, k)
	if o.stack.refs--; o.stack.refs == 0 {
		delete(u.stacks, o.stack.key)
		u.frames -= len(o.stack.frames)
	}
}

// followed is what a recording that follows objects says of them at one
// instant: alive (true) or not proven yet (false), by object.
type followed map[inUseKey]bool

// followedNow asks view which objects the recording follows; nil when it
// follows none. It takes the recording's lock: the caller must not hold
// one that the recording's Stacks callback takes.
func followedNow(view *recording.LiveView) followed {
	f := followed{}
	if !view.Objects(func(pid int, obj merge.AllocObject, alive bool) { f[inUseKey{pid, obj}] = alive }) {
		return nil
	}
	return f
}

// cut adds to iv, as in-use samples, the objects f says are alive, and
// forgets those it does not name that were kept before it was asked (those
// since may not have been followed yet when it was).
func (u *inUse) cut(f followed, iv *Interval) {
	gen := u.gen
	u.gen++
	if f == nil {
		return
	}
	for k, o := range u.objects {
		alive, ok := f[k]
		switch {
		case alive:
			p := o.process
			iv.Add(merge.Stack{PID: p.PID, Comm: o.thread, Alloc: true, Alive: true, Period: o.objects,
				AllocBytes: o.bytes, Labels: o.labels, Frames: o.stack.frames}, &p)
		case !ok && o.gen < gen:
			u.drop(k, o)
		}
	}
}
