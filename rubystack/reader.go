package rubystack

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// maxCacheEntries bounds each symbolization cache; a full cache is dropped
// and refilled rather than grown.
const maxCacheEntries = 1 << 16

// Reader reads the Ruby VM of one process from outside: threads, their
// stacks, and the names of frames. It caches what it symbolizes, keyed by
// address and validated on every use, because GC compaction moves objects.
type Reader struct {
	PID    int
	Layout *rubybuild.Layout

	mem    *pageCache // reads during a snapshot, page-cached
	direct *objects   // uncached reads, for checks that must see the present
	o      *objects
	syms   *idTable
	vmPtr  uint64 // runtime address of ruby_current_vm_ptr, or 0
	// objspace is vm->objspace once read (GCStamp).
	objspace   uint64
	noGCStamps bool
	epochs     epochs // the epochs GCStamp saw, with their major GC counts
	shapes     uint64 // runtime address of rb_shape_tree_ptr or rb_shape_tree, or 0
	iseqs      map[uint64]*iseq
	cmes       map[uint64]*methodEntry
	classes    map[uint64]classEntry
	typeNames  map[uint64]string // RUBY_T_* by value (ObjectClass)

	// shapesStruct: shapes is the tree itself (rb_shape_tree, 4.0+), not a
	// pointer to it (rb_shape_tree_ptr, 3.3 and 3.4).
	shapesStruct bool
	// frozenCore is the address of rb_mRubyVMFrozenCore, or 0.
	frozenCore uint64

	// Stats counts work and trouble since the Reader was made.
	Stats ReaderStats
}

// ReaderStats are counters a profiler reports.
type ReaderStats struct {
	Reads         int // reads of target memory
	UnknownFrames int // frames that could not be read consistently
	Truncated     int // stacks cut at MaxFrames
	Moved         int // walks whose thread kept moving through every retry
}

// NewReader prepares to read process p's VM through mem.
func NewReader(p *Process, mem Memory) (*Reader, error) { return NewReaderFor(p, mem, 0) }

// NewReaderFor is NewReader that also refuses a build lacking the anchors
// use needs (UseSnapshot, UseRecord), in the same one-line shape.
func NewReaderFor(p *Process, mem Memory, use rubybuild.Use) (*Reader, error) {
	l, err := p.Binary.Layout()
	if err != nil {
		return nil, err
	}
	a := p.Binary.Anchors(l)
	if err := a.Usable(use); err != nil {
		return nil, p.Binary.Refuse(err)
	}
	at := func(x rubybuild.Anchor) uint64 {
		if x.Found {
			return p.Bias + x.Address
		}
		return 0
	}
	shapes, shapesStruct := at(a.ShapeTree), a.ShapeTreeIsStruct
	if err := p.loaded(at(a.VMPtr)); err != nil {
		return nil, err
	}
	r := newReader(p.PID, mem, l, at(a.GlobalSymbols), at(a.VMPtr), shapes)
	r.shapesStruct = shapesStruct
	r.frozenCore = at(a.FrozenCore)
	if !l.FromDWARF() {
		if err := r.CheckLayout(); err != nil {
			if errors.Is(err, ErrVMNotReady) {
				return nil, err
			}
			return nil, p.Binary.Refuse(err)
		}
	}
	return r, nil
}

func newReader(pid int, mem Memory, l *rubybuild.Layout, globalSymbols, vmPtr, shapeTree uint64) *Reader {
	r := &Reader{PID: pid, Layout: l, vmPtr: vmPtr, shapes: shapeTree,
		iseqs: map[uint64]*iseq{}, cmes: map[uint64]*methodEntry{}, classes: map[uint64]classEntry{}}
	cm := &countingMemory{inner: mem, reads: &r.Stats.Reads}
	r.mem = &pageCache{inner: cm}
	r.o = newObjects(r.mem, l)
	r.direct = newObjects(cm, l)
	r.syms = &idTable{o: r.o, addr: globalSymbols, cache: map[uint64]string{}}
	return r
}

// LimitStrings has the reader read at most n bytes of each String (a
// label, a path, a class name's part), for a caller that keeps no more of
// a name than that: a longer String is read as its first n bytes. n ≤ 0,
// or more than the reader's own bound, leaves that bound. What the
// reader remembers of names read before (checking its layout reads a
// stack) is forgotten.
func (r *Reader) LimitStrings(n int) {
	if n > 0 && n < maxStringBytes {
		r.o.maxString, r.direct.maxString = uint64(n), uint64(n)
		clear(r.iseqs)
		clear(r.cmes)
		clear(r.classes)
		clear(r.syms.cache)
	}
}

// remember stores v in a bounded cache.
func (r *Reader) remember(cache any, key uint64, v any) {
	switch c := cache.(type) {
	case map[uint64]*iseq:
		if len(c) >= maxCacheEntries {
			clear(c)
		}
		c[key] = v.(*iseq)
	case map[uint64]*methodEntry:
		if len(c) >= maxCacheEntries {
			clear(c)
		}
		c[key] = v.(*methodEntry)
	case map[uint64]classEntry:
		if len(c) >= maxCacheEntries {
			clear(c)
		}
		c[key] = v.(classEntry)
	}
}

// pageCache serves reads from whole pages of target memory read once per
// snapshot: a walk touches thousands of words on a few dozen pages (the VM
// stack, the heap pages of iseqs and method entries). It is emptied at the
// start and end of every snapshot, so nothing stale outlives one.
type pageCache struct {
	inner Memory
	pages map[uint64]*page // page address to contents; nil when off
	table map[uint64]*page // pages' map, emptied and used again
	// exact turns the cache off for good, so the memory below sees exactly
	// the reads the walk makes (small memory snapshots for fixtures).
	exact bool
}

const (
	pageSize      = 4096
	maxCachePages = 4096 // 16 MiB per snapshot at most
)

type page [pageSize]byte

// pagePool holds the pages of ended snapshots, every reader's, for the
// next ones to fill: reading at 999 Hz would otherwise make a page of
// garbage for every page read (gigabytes a minute on deep stacks).
var pagePool = sync.Pool{New: func() any { return new(page) }}

// Batch serves the reads until end is called from whole pages of memory,
// each read once: for a caller that reads many objects at one instant (the
// names of a sample's frames), whose GC stamps before and after say nothing
// moved meanwhile. A batch already under way (a snapshot) goes on.
func (r *Reader) Batch() (end func()) {
	if r.mem.pages != nil || r.mem.exact {
		return func() {}
	}
	r.mem.start()
	return r.mem.stop
}

func (c *pageCache) start() {
	if c.exact {
		return
	}
	if c.table == nil {
		c.table = map[uint64]*page{}
	}
	c.pages = c.table
}

func (c *pageCache) stop() {
	c.refresh()
	c.pages = nil
}

// refresh empties a cache that is on, for a fresh look at memory that
// moved (a retry of a torn read), and leaves one that is off off. start
// does not: called on a cache that is on, it keeps the pages it holds.
func (c *pageCache) refresh() {
	for _, b := range c.pages {
		pagePool.Put(b)
	}
	clear(c.table)
}

func (c *pageCache) ReadAt(p []byte, addr uint64) error {
	if c.pages == nil || len(p) > pageSize {
		return c.inner.ReadAt(p, addr)
	}
	for done := 0; done < len(p); {
		a := addr + uint64(done)
		at := a &^ (pageSize - 1)
		b, ok := c.pages[at]
		if !ok {
			if len(c.pages) >= maxCachePages {
				return c.inner.ReadAt(p, addr)
			}
			b = pagePool.Get().(*page)
			if err := c.inner.ReadAt(b[:], at); err != nil {
				// Part of the page is not mapped: read just what was asked.
				pagePool.Put(b)
				return c.inner.ReadAt(p, addr)
			}
			c.pages[at] = b
		}
		done += copy(p[done:], b[a-at:])
	}
	return nil
}

// countingMemory counts reads.
type countingMemory struct {
	inner Memory
	reads *int
}

func (m *countingMemory) ReadAt(p []byte, addr uint64) error {
	*m.reads++
	return m.inner.ReadAt(p, addr)
}

// ReadPieces reads many pieces at once where the memory can, else one by
// one.
func (m *countingMemory) ReadPieces(p [][]byte, addrs []uint64, ok []bool) {
	*m.reads++
	readPieces(m.inner, p, addrs, ok)
}

// methodEntry is a callable method entry and its definition.
type methodEntry struct {
	def          uint64
	defType      int64
	iseqPtr      uint64 // def->body.iseq.iseqptr, for ISEQ methods
	originalID   uint64
	definedClass uint64
}

func (r *Reader) methodEntry(cme uint64) (*methodEntry, error) {
	if err := r.o.checkImemo(cme, "imemo_ment", "a method entry"); err != nil {
		return nil, err
	}
	me := &r.Layout.MethodEntry
	def, err := r.o.word(cme + uint64(me.Def))
	if err != nil {
		return nil, err
	}
	if c, ok := r.cmes[cme]; ok && c.def == def {
		return c, nil
	}
	e := &methodEntry{def: def}
	if e.definedClass, err = r.o.word(cme + uint64(me.DefinedClass)); err != nil {
		return nil, err
	}
	md := &r.Layout.MethodDefinition
	word, err := r.o.u32(def + uint64(md.Type.Offset))
	if err != nil {
		return nil, err
	}
	e.defType = int64(word>>md.Type.BitOffset) & (1<<md.Type.BitSize - 1)
	if e.originalID, err = r.o.word(def + uint64(md.OriginalID)); err != nil {
		return nil, err
	}
	if e.defType == r.Layout.Constants["VM_METHOD_TYPE_ISEQ"] {
		if e.iseqPtr, err = r.o.word(def + uint64(md.IseqPtr)); err != nil {
			return nil, err
		}
	}
	r.remember(r.cmes, cme, e)
	return e, nil
}

// maxEPChain bounds the walk up a block's environments to its method's.
// Ruby's own walk has no bound, and chains far longer than the 6 otel
// measured on a Rails app are ordinary: every eval that makes a new local
// variable in a binding (ERB templates rendered in one) adds an environment
// to it. The bound only stops a cycle that torn memory can make.
const maxEPChain = 1 << 16

// frameMethodEntry is rb_vm_frame_method_entry: the method entry of a frame,
// found in ep[-2] of the frame's env or of an env it was created in.
func (r *Reader) frameMethodEntry(ep uint64) (uint64, error) {
	cme, _, err := r.envMethodEntry(ep, false)
	return cme, err
}

// EnvMethodEntry is the method entry found from the environment at ep up
// its chain (rb_vm_frame_method_entry's walk), or 0 where the chain ends in
// a local environment without one: what the BPF walker hands over when it
// stops short of the end of a long chain. old says whether every
// environment on the way escaped to the heap as an object of the old
// generation, and every method entry or svar read there is old too: what
// was read then stays until the next major GC (see Old).
func (r *Reader) EnvMethodEntry(ep uint64) (cme uint64, old bool, err error) {
	return r.envMethodEntry(ep, true)
}

func (r *Reader) envMethodEntry(ep uint64, generation bool) (cme uint64, old bool, err error) {
	local := uint64(r.Layout.Constants["VM_ENV_FLAG_LOCAL"])
	escaped := uint64(r.Layout.Constants["VM_ENV_FLAG_ESCAPED"])
	old = generation && escaped != 0
	for i := 0; i < maxEPChain; i++ {
		// ep[-2] me_cref, ep[-1] specval, ep[0] flags, and of an
		// environment that escaped to the heap ep[1], its object
		// (VM_ENV_DATA_INDEX_ENV).
		var env [32]byte
		n := 24 // a walk reads what rb_vm_frame_method_entry does, no more
		if old {
			n = 32
		}
		if err := r.mem.ReadAt(env[:n], ep-16); err != nil {
			return 0, false, err
		}
		meCref, specval, flags := le64(env[0:]), le64(env[8:]), le64(env[16:])
		if old {
			old = flags&escaped != 0 && r.oldObject(le64(env[24:]), "imemo_env") && r.oldObject(meCref, "")
		}
		if flags&local != 0 {
			cme, err := r.checkMethodEntry(meCref, true)
			return cme, old && err == nil && r.oldObject(cme, ""), err
		}
		if m, err := r.checkMethodEntry(meCref, false); err != nil || m != 0 {
			return m, old && err == nil, err
		}
		ep = specval &^ 3 // VM_ENV_PREV_EP: GC_GUARDED_PTR_REF
		if ep == 0 {
			return 0, false, fmt.Errorf("%w: env chain ends without a local env", errTorn)
		}
	}
	return 0, false, fmt.Errorf("%w: env chain longer than %d", errTorn, maxEPChain)
}

// oldObject says whether v is a special constant, or an object of the old
// generation, of imemo type imemo when imemo is not "".
func (r *Reader) oldObject(v uint64, imemo string) bool {
	if v == 0 || r.o.special(v) {
		return imemo == ""
	}
	if imemo != "" {
		if t, err := r.o.imemoType(v); err != nil || t != r.Layout.Constants[imemo] {
			return false
		}
	}
	old, err := r.Old(v)
	return err == nil && old
}

// checkMethodEntry is vm_insnhelper.c's check_method_entry.
func (r *Reader) checkMethodEntry(v uint64, canBeSvar bool) (uint64, error) {
	if v == 0 || r.o.special(v) {
		return 0, nil
	}
	typ, err := r.o.imemoType(v)
	if err != nil {
		return 0, err
	}
	c := r.Layout.Constants
	switch {
	case typ == c["imemo_ment"]:
		return v, nil
	case typ == c["imemo_svar"] && canBeSvar:
		inner, err := r.o.word(v + uint64(r.Layout.SVar.CrefOrMe))
		if err != nil {
			return 0, err
		}
		return r.checkMethodEntry(inner, false)
	}
	return 0, nil // cref and others: no method entry
}

var errNoVM = errors.New("ruby_current_vm_ptr was not found")

// LocalMethodEntry is the method entry a local environment's me_cref leads
// to (rb_vm_frame_method_entry's last step): v itself, the entry an svar
// holds, or 0 for anything else.
func (r *Reader) LocalMethodEntry(v uint64) (uint64, error) {
	return r.checkMethodEntry(v, true)
}

// IsCFunc says whether cme is the method entry of a C method (a frame
// rb_profile_frames reports), reading it if need be.
func (r *Reader) IsCFunc(cme uint64) bool {
	me, err := r.methodEntry(cme)
	return err == nil && me.defType == r.Layout.Constants["VM_METHOD_TYPE_CFUNC"]
}
