package payload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// A recording's file holds most samples' stacks as references into two
// trees of frames it builds as it goes, one of Ruby frames and one of
// native PCs: a node is a frame and the node of its caller (0: none, the
// thread's first frame). Consecutive samples of one program share almost
// all of their stack, the leaf aside: each sample carries the node its
// stack shares with the samples before it, in each tree, and the frames
// below that node no earlier sample had. A 200-frame stack costs a few
// bytes once its frames are known, where the program's payload carries 24
// bytes a frame.
//
// A sample's new frames always hang in one chain from the node it shares
// (a node no earlier sample had has no callees yet). A compact payload
// (flag Compact, version CompactVersion) is the program's header (Nframes
// and Nnatives as the stack has them), then:
//
//	u32 tree flags (treeReset: both trees are emptied before this sample's nodes)
//	u32 the node in the Ruby tree the new Ruby frames hang from (or the leaf, if none)
//	u32 the same in the native tree
//	u32 new Ruby frames, u32 new native frames
//	the new Ruby frames (struct frame), outermost first
//	the new native PCs (u64), outermost first
//	the labels, as the program wrote them
//
// New nodes are numbered on from the tree's last, in the order given. The
// trees are the file's, in the order its records lie (one writer,
// TreeEncoder; one reader reading every sample in order, TreeDecoder): a
// sample means nothing without the samples before it.
const (
	// CompactVersion is the version of a compact payload; the program's
	// payloads are of Version. CompactVersionV8, CompactVersionV10 and
	// CompactVersionV12, of older recordings', whose program wrote
	// version 8 (a header without alloc_bytes), 10 (without alloc_window)
	// or 12 (without alloc_seq, alloc_slot and alloc_class).
	CompactVersion    = 15
	CompactVersionV8  = 9
	CompactVersionV10 = 11
	CompactVersionV12 = 13
	// Compact: the payload's frames are references into its file's
	// trees (TreeDecoder.Expand). Set by the recorder, never by the
	// program.
	Compact = 1 << 23

	// MaxTreeNodes bounds each tree. The writer starts both afresh
	// (treeReset) rather than grow past it; a reader refuses more.
	MaxTreeNodes = 1 << 17

	treeReset      = 1 << 0
	treeHeaderSize = 5 * 4
)

// ErrTooLarge: a payload made compact would be larger than its caller
// allows (its frames all new, and a record near its size limit).
var ErrTooLarge = errors.New("payload: compact: larger than allowed")

// ErrCompact: a compact payload decoded without its file's trees.
var ErrCompact = errors.New("payload: compact: expand it with its recording's frame trees first")

var (
	offFlags   = int(unsafe.Offsetof(cPayloadHeader{}.Flags))
	offVersion = int(unsafe.Offsetof(cPayloadHeader{}.Version))
	offLength  = int(unsafe.Offsetof(cPayloadHeader{}.Length))
)

// rubyKey is a Ruby node: its caller's number and its frame's bytes.
type rubyKey struct {
	caller uint32
	frame  [3]uint64
}

// nativeKey is a native node: its caller's number and its PC.
type nativeKey struct {
	caller uint32
	pc     uint64
}

// TreeEncoder makes the program's payloads compact, for one file written
// in order. Its memory is bounded by MaxTreeNodes per tree.
type TreeEncoder struct {
	ruby   map[rubyKey]uint32
	native map[nativeKey]uint32
	// last is each thread's previous stack in each tree, outermost frame
	// first, and its nodes: a sample's frames that equal the thread's
	// previous ones from the outermost on have the same nodes, found
	// without a map lookup each.
	last map[uint32]*lastStack
	// resets counts the times the trees were started afresh: a thread's
	// last stack of an earlier count names nodes that are gone.
	resets uint64
	// lastWritten is resets as the last payload written told it.
	lastWritten uint64
}

type lastStack struct {
	resets uint64
	// ruby is the stack's frames as its payload held them, leaf first;
	// the outermost len(rubyIDs) of them are in the tree, at rubyIDs
	// (outermost first).
	ruby      []byte
	rubyIDs   []uint32
	native    []uint64
	nativeIDs []uint32
}

// maxLastStacks bounds the threads whose last stack TreeEncoder keeps.
const maxLastStacks = 4096

// Compact appends to dst raw, a payload the program wrote, made compact,
// and adds its new frames to the trees. A payload it cannot make compact (of
// another version, not readable, or larger than limit bytes made compact)
// is an error, and changes nothing: the caller writes it as it is, which
// readers read as well.
func (e *TreeEncoder) Compact(dst, raw []byte, limit int) ([]byte, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return dst, err
	}
	if h.Version != Version || h.Flags&Compact != 0 || int(h.HeaderSize) != headerSize {
		return dst, fmt.Errorf("payload: version %d: only version %d payloads are made compact", h.Version, Version)
	}
	nf, nn := int(h.Nframes), int(h.Nnatives)
	frames := raw[headerSize : headerSize+nf*frameSize]
	labels := raw[headerSize+nf*frameSize : headerSize+nf*frameSize+int(h.Nlabels)*labelSize]
	natives := raw[headerSize+nf*frameSize+len(labels):][:nn*8]
	reset := e.ruby == nil || len(e.ruby)+nf > MaxTreeNodes || len(e.native)+nn > MaxTreeNodes
	last := e.lastOf(h.Tid)
	var rubyAt, nativeAt uint32
	k, m := 0, 0 // frames (outermost) the trees have
	if !reset {
		rubyAt, k = e.sharedRuby(last, frames)
		nativeAt, m = e.sharedNative(last, natives)
	}
	size := headerSize + treeHeaderSize + (nf-k)*frameSize + (nn-m)*8 + len(labels)
	if size > limit {
		return dst, ErrTooLarge
	}
	if reset {
		e.reset()
		last = e.lastOf(h.Tid)
	}
	start := len(dst)
	dst = append(dst, raw[:headerSize]...)
	var flags uint32
	if e.resets != e.lastWritten {
		flags |= treeReset
		e.lastWritten = e.resets
	}
	le := binary.LittleEndian
	dst = le.AppendUint32(dst, flags)
	dst = le.AppendUint32(dst, rubyAt)
	dst = le.AppendUint32(dst, nativeAt)
	dst = le.AppendUint32(dst, uint32(nf-k))
	dst = le.AppendUint32(dst, uint32(nn-m))
	for i := k; i < nf; i++ {
		f := frames[(nf-1-i)*frameSize:][:frameSize]
		key := rubyKey{caller: rubyAt, frame: [3]uint64{le.Uint64(f), le.Uint64(f[8:]), le.Uint64(f[16:])}}
		rubyAt = uint32(len(e.ruby) + 1)
		e.ruby[key] = rubyAt
		last.rubyIDs = append(last.rubyIDs, rubyAt)
		dst = append(dst, f...)
	}
	last.ruby = append(last.ruby[:0], frames...)
	for i := m; i < nn; i++ {
		pc := le.Uint64(natives[(nn-1-i)*8:])
		key := nativeKey{caller: nativeAt, pc: pc}
		nativeAt = uint32(len(e.native) + 1)
		e.native[key] = nativeAt
		last.native = append(last.native, pc)
		last.nativeIDs = append(last.nativeIDs, nativeAt)
		dst = le.AppendUint64(dst, pc)
	}
	dst = append(dst, labels...)
	out := dst[start:]
	le.PutUint16(out[offVersion:], CompactVersion)
	le.PutUint32(out[offFlags:], h.Flags|Compact)
	le.PutUint32(out[offLength:], uint32(len(out)))
	return dst, nil
}

// lastOf is thread tid's last stack, as the trees stand.
func (e *TreeEncoder) lastOf(tid uint32) *lastStack {
	if e.last == nil {
		e.last = map[uint32]*lastStack{}
	}
	last := e.last[tid]
	if last == nil {
		if len(e.last) >= maxLastStacks {
			clear(e.last)
		}
		last = &lastStack{resets: e.resets}
		e.last[tid] = last
	}
	if last.resets != e.resets {
		last.ruby, last.rubyIDs, last.native, last.nativeIDs = last.ruby[:0], last.rubyIDs[:0], last.native[:0], last.nativeIDs[:0]
		last.resets = e.resets
	}
	return last
}

// sharedRuby finds how many of frames (leaf first), from the outermost,
// the Ruby tree has, and the node of the last of them (0: none); last is
// left holding their nodes. The part the thread's last stack shares is
// found by comparing bytes; the tree is searched only above it.
func (e *TreeEncoder) sharedRuby(last *lastStack, frames []byte) (at uint32, k int) {
	le := binary.LittleEndian
	n := len(frames) / frameSize
	k = SharedOutermost(last.ruby[len(last.ruby)-len(last.rubyIDs)*frameSize:], frames)
	last.rubyIDs = last.rubyIDs[:k]
	if k > 0 {
		at = last.rubyIDs[k-1]
	}
	for ; k < n; k++ {
		f := frames[(n-1-k)*frameSize:]
		id, ok := e.ruby[rubyKey{caller: at, frame: [3]uint64{le.Uint64(f), le.Uint64(f[8:]), le.Uint64(f[16:])}}]
		if !ok {
			break
		}
		last.rubyIDs = append(last.rubyIDs, id)
		at = id
	}
	last.ruby = append(last.ruby[:0], frames[(n-k)*frameSize:]...)
	return at, k
}

// sharedNative is sharedRuby for native PCs.
func (e *TreeEncoder) sharedNative(last *lastStack, natives []byte) (at uint32, m int) {
	n := len(natives) / 8
	for ; m < n; m++ {
		pc := binary.LittleEndian.Uint64(natives[(n-1-m)*8:])
		if m < len(last.native) && last.native[m] == pc {
			at = last.nativeIDs[m]
			continue
		}
		id, ok := e.native[nativeKey{caller: at, pc: pc}]
		if !ok {
			break
		}
		last.native, last.nativeIDs = append(last.native[:m], pc), append(last.nativeIDs[:m], id)
		at = id
	}
	last.native, last.nativeIDs = last.native[:m], last.nativeIDs[:m]
	return at, m
}

// reset starts both trees afresh.
func (e *TreeEncoder) reset() {
	if e.ruby == nil {
		e.ruby, e.native = map[rubyKey]uint32{}, map[nativeKey]uint32{}
	} else {
		clear(e.ruby)
		clear(e.native)
	}
	e.resets++
}

// TreeDecoder turns the compact payloads of one file back into the
// program's, given every sample of the file in order. Its memory is
// bounded by MaxTreeNodes per tree.
type TreeDecoder struct {
	ruby   []rubyNode // node n at n-1
	native []nativeNode
	out    []byte
}

type rubyNode struct {
	caller uint32
	frame  [24]byte // struct frame
}

type nativeNode struct {
	caller uint32
	pc     uint64
}

// Expand returns raw as the program wrote it (the names the recorder gave
// it kept): raw itself if it is not compact, else its frames found in the
// trees, to which its new nodes are added, in a buffer valid until the
// next call. A payload that does not read as one is an error, and adds
// nothing.
func (d *TreeDecoder) Expand(raw []byte) ([]byte, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return nil, err
	}
	if h.Flags&Compact == 0 {
		return raw, nil
	}
	hs := int(h.HeaderSize)
	b := raw[hs:h.Length]
	if len(b) < treeHeaderSize {
		return nil, fmt.Errorf("payload: compact: %d bytes after the header", len(b))
	}
	le := binary.LittleEndian
	flags, rubyAt, nativeAt := le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:])
	nr, nn := le.Uint32(b[12:]), le.Uint32(b[16:])
	if nr > h.Nframes || nn > h.Nnatives {
		return nil, fmt.Errorf("payload: compact: %d and %d new frames of %d and %d", nr, nn, h.Nframes, h.Nnatives)
	}
	need := treeHeaderSize + int(nr)*frameSize + int(nn)*8 + int(h.Nlabels)*labelSize
	if need > len(b) {
		return nil, fmt.Errorf("payload: compact: %d new frames and %d labels do not fit %d bytes", nr+nn, h.Nlabels, len(b))
	}
	if flags&treeReset != 0 {
		d.ruby, d.native = d.ruby[:0], d.native[:0]
	}
	r0, n0 := len(d.ruby), len(d.native)
	switch {
	case r0+int(nr) > MaxTreeNodes || n0+int(nn) > MaxTreeNodes:
		return nil, fmt.Errorf("payload: compact: trees of more than %d nodes", MaxTreeNodes)
	case int(rubyAt) > r0 || int(nativeAt) > n0:
		return nil, fmt.Errorf("payload: compact: nodes %d and %d of trees of %d and %d", rubyAt, nativeAt, r0, n0)
	}
	// The new frames, outermost first, each called from the one before.
	at := treeHeaderSize
	for range nr {
		n := rubyNode{caller: rubyAt}
		copy(n.frame[:], b[at:at+frameSize])
		d.ruby = append(d.ruby, n)
		rubyAt = uint32(len(d.ruby))
		at += frameSize
	}
	for range nn {
		d.native = append(d.native, nativeNode{caller: nativeAt, pc: le.Uint64(b[at:])})
		nativeAt = uint32(len(d.native))
		at += 8
	}
	if err := d.expand(h, rubyAt, nativeAt, b[at:at+int(h.Nlabels)*labelSize]); err != nil {
		d.ruby, d.native = d.ruby[:r0], d.native[:n0]
		return nil, err
	}
	return d.out, nil
}

// expand writes into d.out the payload of header h whose leaves are nodes
// rubyLeaf and nativeLeaf, with labels.
func (d *TreeDecoder) expand(h cPayloadHeader, rubyLeaf, nativeLeaf uint32, labels []byte) error {
	d.out = appendHeader(d.out[:0], h)
	// A node's caller has a lower number: each walk ends, and within
	// the frames the header says.
	n := rubyLeaf
	for i := 0; n != 0 && i < int(h.Nframes); i++ {
		d.out = append(d.out, d.ruby[n-1].frame[:]...)
		n = d.ruby[n-1].caller
	}
	if n != 0 || len(d.out) != headerSize+int(h.Nframes)*frameSize {
		return fmt.Errorf("payload: compact: Ruby node %d: not a stack of %d frames", rubyLeaf, h.Nframes)
	}
	d.out = append(d.out, labels...)
	natives := len(d.out)
	n = nativeLeaf
	for i := 0; n != 0 && i < int(h.Nnatives); i++ {
		d.out = binary.LittleEndian.AppendUint64(d.out, d.native[n-1].pc)
		n = d.native[n-1].caller
	}
	if n != 0 || len(d.out)-natives != int(h.Nnatives)*8 {
		return fmt.Errorf("payload: compact: native node %d: not a stack of %d frames", nativeLeaf, h.Nnatives)
	}
	binary.LittleEndian.PutUint32(d.out[offLength:], uint32(len(d.out)))
	return nil
}

// appendHeader appends h as the program lays it out, as a payload of
// Version (not compact).
func appendHeader(dst []byte, h cPayloadHeader) []byte {
	h.Version, h.HeaderSize, h.Flags = Version, uint16(headerSize), h.Flags&^Compact
	return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize)...)
}
