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
// all of their stack, the leaf aside: each sample carries the number of
// its leaf's node in each tree and only the nodes no earlier sample
// defined. A 200-frame stack costs a few bytes once its frames are known,
// where the program's payload carries 24 bytes a frame.
//
// A compact payload (flag Compact, version CompactVersion) is the
// program's header (Nframes and Nnatives as the stack has them), then:
//
//	u32 tree flags (treeReset: both trees are emptied before this sample's nodes)
//	u32 the leaf's node in the Ruby tree (0: no frames)
//	u32 the leaf's node in the native tree (0: none)
//	u32 new Ruby nodes, u32 new native nodes
//	each new Ruby node: u32 caller, then its frame (struct frame)
//	each new native node: u32 caller, u64 PC
//	the labels, as the program wrote them
//
// New nodes are numbered on from the tree's last, in the order given, so a
// node's caller always has a lower number. The trees are the file's, in
// the order its records lie (one writer, TreeEncoder; one reader reading
// every sample in order, TreeDecoder): a sample means nothing without the
// samples before it.
const (
	// CompactVersion is the version of a compact payload; the program's
	// payloads are of Version.
	CompactVersion = 9
	// Compact: the payload's frames are references into its file's
	// trees (TreeDecoder.Expand). Set by the recorder, never by the
	// program.
	Compact = 1 << 23

	// MaxTreeNodes bounds each tree. The writer starts both afresh
	// (treeReset) rather than grow past it; a reader refuses more.
	MaxTreeNodes = 1 << 17

	treeReset      = 1 << 0
	treeHeaderSize = 5 * 4
	rubyNodeSize   = 4 + 24 // caller, struct frame
	nativeNodeSize = 4 + 8  // caller, PC
)

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

	rubyNodes, nativeNodes []byte // this sample's new nodes
}

type lastStack struct {
	resets    uint64
	ruby      []rubyKey // outermost first; caller unused
	rubyIDs   []uint32
	native    []uint64
	nativeIDs []uint32
}

// maxLastStacks bounds the threads whose last stack TreeEncoder keeps.
const maxLastStacks = 4096

// Compact appends to dst raw, a payload the program wrote, made compact,
// and adds its new frames to the trees. A payload it cannot make compact (of
// another version, or not readable) is an error; the caller writes it as
// it is, which readers read as well.
func (e *TreeEncoder) Compact(dst, raw []byte) ([]byte, error) {
	h, err := decodeHeader(raw)
	if err != nil {
		return dst, err
	}
	if h.Version != Version || h.Flags&Compact != 0 || int(h.HeaderSize) != headerSize {
		return dst, fmt.Errorf("payload: version %d: only version %d payloads are made compact", h.Version, Version)
	}
	if e.ruby == nil || len(e.ruby)+int(h.Nframes) > MaxTreeNodes || len(e.native)+int(h.Nnatives) > MaxTreeNodes {
		e.reset()
	}
	resets := e.resets
	nf, nn := int(h.Nframes), int(h.Nnatives)
	frames := raw[headerSize : headerSize+nf*frameSize]
	labels := raw[headerSize+nf*frameSize : headerSize+nf*frameSize+int(h.Nlabels)*labelSize]
	natives := raw[len(labels)+headerSize+nf*frameSize:][:nn*8]

	last := e.last[h.Tid]
	if last == nil {
		if len(e.last) >= maxLastStacks {
			clear(e.last)
		}
		last = &lastStack{}
		e.last[h.Tid] = last
	}
	if last.resets != e.resets {
		last.ruby, last.rubyIDs, last.native, last.nativeIDs = last.ruby[:0], last.rubyIDs[:0], last.native[:0], last.nativeIDs[:0]
		last.resets = e.resets
	}

	e.rubyNodes = e.rubyNodes[:0]
	var rubyLeaf uint32
	same := true
	for i := range nf {
		// Outermost first: frame nf-1-i.
		f := frames[(nf-1-i)*frameSize:]
		k := rubyKey{caller: rubyLeaf, frame: [3]uint64{
			binary.LittleEndian.Uint64(f), binary.LittleEndian.Uint64(f[8:]), binary.LittleEndian.Uint64(f[16:])}}
		if same && i < len(last.ruby) && last.ruby[i].frame == k.frame {
			rubyLeaf = last.rubyIDs[i]
			continue
		}
		if same {
			same = false
			last.ruby, last.rubyIDs = last.ruby[:i], last.rubyIDs[:i]
		}
		id, ok := e.ruby[k]
		if !ok {
			id = uint32(len(e.ruby) + 1)
			e.ruby[k] = id
			e.rubyNodes = binary.LittleEndian.AppendUint32(e.rubyNodes, rubyLeaf)
			e.rubyNodes = append(e.rubyNodes, f[:frameSize]...)
		}
		rubyLeaf = id
		last.ruby = append(last.ruby, k)
		last.rubyIDs = append(last.rubyIDs, id)
	}
	if same {
		last.ruby, last.rubyIDs = last.ruby[:nf], last.rubyIDs[:nf]
	}

	e.nativeNodes = e.nativeNodes[:0]
	var nativeLeaf uint32
	same = true
	for i := range nn {
		pc := binary.LittleEndian.Uint64(natives[(nn-1-i)*8:])
		if same && i < len(last.native) && last.native[i] == pc {
			nativeLeaf = last.nativeIDs[i]
			continue
		}
		if same {
			same = false
			last.native, last.nativeIDs = last.native[:i], last.nativeIDs[:i]
		}
		k := nativeKey{caller: nativeLeaf, pc: pc}
		id, ok := e.native[k]
		if !ok {
			id = uint32(len(e.native) + 1)
			e.native[k] = id
			e.nativeNodes = binary.LittleEndian.AppendUint32(e.nativeNodes, nativeLeaf)
			e.nativeNodes = binary.LittleEndian.AppendUint64(e.nativeNodes, pc)
		}
		nativeLeaf = id
		last.native = append(last.native, pc)
		last.nativeIDs = append(last.nativeIDs, id)
	}
	if same {
		last.native, last.nativeIDs = last.native[:nn], last.nativeIDs[:nn]
	}

	start := len(dst)
	dst = append(dst, raw[:headerSize]...)
	var flags uint32
	if resets != e.lastWritten {
		flags |= treeReset
		e.lastWritten = resets
	}
	dst = binary.LittleEndian.AppendUint32(dst, flags)
	dst = binary.LittleEndian.AppendUint32(dst, rubyLeaf)
	dst = binary.LittleEndian.AppendUint32(dst, nativeLeaf)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.rubyNodes)/rubyNodeSize))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(e.nativeNodes)/nativeNodeSize))
	dst = append(dst, e.rubyNodes...)
	dst = append(dst, e.nativeNodes...)
	dst = append(dst, labels...)
	out := dst[start:]
	binary.LittleEndian.PutUint16(out[offVersion:], CompactVersion)
	binary.LittleEndian.PutUint32(out[offFlags:], h.Flags|Compact)
	binary.LittleEndian.PutUint32(out[offLength:], uint32(len(out)))
	return dst, nil
}

// reset starts both trees afresh.
func (e *TreeEncoder) reset() {
	if e.ruby == nil {
		e.ruby, e.native, e.last = map[rubyKey]uint32{}, map[nativeKey]uint32{}, map[uint32]*lastStack{}
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
	flags, rubyLeaf, nativeLeaf := le.Uint32(b), le.Uint32(b[4:]), le.Uint32(b[8:])
	nr, nn := le.Uint32(b[12:]), le.Uint32(b[16:])
	if nr > h.Nframes || nn > h.Nnatives {
		return nil, fmt.Errorf("payload: compact: %d and %d new nodes for %d frames and %d native frames", nr, nn, h.Nframes, h.Nnatives)
	}
	need := treeHeaderSize + int(nr)*rubyNodeSize + int(nn)*nativeNodeSize + int(h.Nlabels)*labelSize
	if need > len(b) {
		return nil, fmt.Errorf("payload: compact: %d new nodes and %d labels do not fit %d bytes", nr+nn, h.Nlabels, len(b))
	}
	if flags&treeReset != 0 {
		d.ruby, d.native = d.ruby[:0], d.native[:0]
	}
	r0, n0 := len(d.ruby), len(d.native)
	if r0+int(nr) > MaxTreeNodes || n0+int(nn) > MaxTreeNodes {
		return nil, fmt.Errorf("payload: compact: trees of more than %d nodes", MaxTreeNodes)
	}
	if err := d.expand(h, b, rubyLeaf, nativeLeaf, int(nr), int(nn)); err != nil {
		d.ruby, d.native = d.ruby[:r0], d.native[:n0]
		return nil, err
	}
	return d.out, nil
}

// expand adds a compact payload's nr and nn new nodes (b: what follows its
// header h) and writes the payload expanded into d.out.
func (d *TreeDecoder) expand(h cPayloadHeader, b []byte, rubyLeaf, nativeLeaf uint32, nr, nn int) error {
	le := binary.LittleEndian
	at := treeHeaderSize
	for range nr {
		n := rubyNode{caller: le.Uint32(b[at:])}
		copy(n.frame[:], b[at+4:at+rubyNodeSize])
		if int(n.caller) > len(d.ruby) {
			return fmt.Errorf("payload: compact: Ruby node %d called from node %d", len(d.ruby)+1, n.caller)
		}
		d.ruby = append(d.ruby, n)
		at += rubyNodeSize
	}
	for range nn {
		n := nativeNode{caller: le.Uint32(b[at:]), pc: le.Uint64(b[at+4:])}
		if int(n.caller) > len(d.native) {
			return fmt.Errorf("payload: compact: native node %d called from node %d", len(d.native)+1, n.caller)
		}
		d.native = append(d.native, n)
		at += nativeNodeSize
	}
	labels := b[at : at+int(h.Nlabels)*labelSize]

	d.out = appendHeader(d.out[:0], h)
	for n, i := rubyLeaf, 0; n != 0; n, i = d.ruby[n-1].caller, i+1 {
		if i == int(h.Nframes) || int(n) > len(d.ruby) {
			return fmt.Errorf("payload: compact: Ruby node %d: not a stack of %d frames", rubyLeaf, h.Nframes)
		}
		d.out = append(d.out, d.ruby[n-1].frame[:]...)
	}
	if len(d.out) != headerSize+int(h.Nframes)*frameSize {
		return fmt.Errorf("payload: compact: Ruby node %d: not a stack of %d frames", rubyLeaf, h.Nframes)
	}
	d.out = append(d.out, labels...)
	natives := len(d.out)
	for n, i := nativeLeaf, 0; n != 0; n, i = d.native[n-1].caller, i+1 {
		if i == int(h.Nnatives) || int(n) > len(d.native) {
			return fmt.Errorf("payload: compact: native node %d: not a stack of %d frames", nativeLeaf, h.Nnatives)
		}
		d.out = le.AppendUint64(d.out, d.native[n-1].pc)
	}
	if len(d.out)-natives != int(h.Nnatives)*8 {
		return fmt.Errorf("payload: compact: native node %d: not a stack of %d frames", nativeLeaf, h.Nnatives)
	}
	le.PutUint32(d.out[offLength:], uint32(len(d.out)))
	return nil
}

// appendHeader appends h as the program lays it out, as a payload of
// Version (not compact).
func appendHeader(dst []byte, h cPayloadHeader) []byte {
	h.Version, h.HeaderSize, h.Flags = Version, uint16(headerSize), h.Flags&^Compact
	return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize)...)
}
