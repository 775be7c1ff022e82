package perfdata

import (
	"bufio"
	"fmt"
	"io"
)

// NewPipeReader reads a pipe-mode perf.data (as `perf record -o -` writes
// it) from a stream such as standard input: a 16-byte header, then
// records. It reads the leading header records (attrs, features, event
// names) before returning, so Events and Feature are ready; on a live
// pipe it thus waits for the first other record. A file-mode perf.data
// needs random access: use Open or NewReader for it.
func NewPipeReader(in io.Reader) (*Reader, error) {
	return newPipeReader(in, "pipe")
}

// eventUpdateName is PERF_EVENT_UPDATE__NAME in struct
// perf_record_event_update.type.
const eventUpdateName = 2

func newPipeReader(in io.Reader, name string) (*Reader, error) {
	r := &Reader{
		name: name, pipe: true, byID: map[uint64]int{}, feats: map[Feature][]byte{},
		in: bufio.NewReaderSize(in, 64<<10), end: -1,
	}
	var head [pipeHeaderSize]byte
	if _, err := io.ReadFull(r.in, head[:]); err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, noEOF(err))
	}
	size, err := checkMagic(head[:])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if size != pipeHeaderSize {
		return nil, fmt.Errorf("%s: header: a file-mode perf.data (header size %d) needs random access, not a stream", name, size)
	}
	r.off = pipeHeaderSize
	// Fold the header records up to the first other one, kept for Next.
	for {
		raw, off, err := r.readRecord()
		if err == io.EOF {
			r.done = true
			break
		}
		var folded bool
		if err == nil {
			folded, err = r.fold(raw)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: record at offset %#x: %w", name, off, err)
		}
		if !folded {
			r.pending, r.pendingOff = raw, off
			break
		}
	}
	if desc, ok := r.feats[FeatEventDesc]; ok {
		r.nameEvents(desc)
	}
	return r, nil
}

// fold absorbs a pipe-mode record that carries header data into the
// events and features, and reports whether it did.
func (r *Reader) fold(raw []byte) (bool, error) {
	typ := RecordType(le.Uint32(raw))
	body := raw[recordHeaderSize:]
	d := &decoder{b: body}
	switch typ {
	case RecordHeaderAttr:
		// struct perf_record_header_attr: attr (attr.size bytes), u64 id[].
		if len(r.events) >= maxEvents {
			return false, fmt.Errorf("HEADER_ATTR: more than %d events", maxEvents)
		}
		d.u32()               // attr.type
		asize := int(d.u32()) // attr.size
		if asize == 0 {
			asize = AttrSizeVer0
		}
		if d.err != nil || asize < AttrSizeVer0 || asize > len(body) {
			return false, fmt.Errorf("HEADER_ATTR: attr size %d in a %d-byte record", asize, len(raw))
		}
		ev := Event{Attr: decodeAttr(body[:min(asize, attrSizeVer8)])}
		ids := &decoder{b: body[asize:]}
		ev.IDs = ids.u64s(nil, ids.left()/8)
		r.addEvent(ev)
	case RecordHeaderFeature:
		// struct perf_record_header_feature: u64 feat_id, then the payload.
		f := d.u64() // feat_id
		if d.err != nil {
			return false, fmt.Errorf("HEADER_FEATURE: %w", d.err)
		}
		if f > 0 && f < featureBits {
			r.feats[Feature(f)] = append([]byte{}, body[8:]...)
		}
		if Feature(f) == FeatEventDesc {
			r.nameEvents(r.feats[FeatEventDesc])
		}
	case RecordEventUpdate:
		// struct perf_record_event_update: u64 type, u64 id, then the data.
		kind, id := d.u64(), d.u64() // type, id
		if d.err != nil {
			return false, fmt.Errorf("EVENT_UPDATE: %w", d.err)
		}
		if ev, ok := r.byID[id]; ok && kind == eventUpdateName {
			r.events[ev].Name = cstring(body[16:])
		}
	case RecordHeaderBuildID:
		// The same struct as each entry of the BUILD_ID feature.
		r.feats[FeatBuildID] = append(r.feats[FeatBuildID], raw...)
	case RecordHeaderTracing:
		// struct perf_record_header_tracing_data: u32 size, then size
		// bytes (padded to 8) of tracing data outside the record.
		n := d.u32() // size
		if d.err != nil {
			return false, fmt.Errorf("HEADER_TRACING_DATA: %w", d.err)
		}
		padded := int64(align8(int(n)))
		data, err := io.ReadAll(io.LimitReader(r.in, padded))
		r.off += int64(len(data))
		if err == nil && int64(len(data)) < padded {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return false, fmt.Errorf("HEADER_TRACING_DATA of %d bytes: %w", n, err)
		}
		r.feats[FeatTracingData] = data[:n]
	default:
		return false, nil
	}
	return true, nil
}
