package perfdata

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/rubyperf/rubyperf/internal/safefile"
)

// Reader reads a perf.data in file mode or pipe mode: its events, its
// feature sections, and its records one at a time:
//
//	r, err := perfdata.Open("perf.data")
//	...
//	defer r.Close()
//	for r.Next() {
//		switch rec := r.Record().(type) {
//		case *perfdata.Sample:
//			name := r.Events()[rec.Event].Name // rec.Event is -1 if no event matched
//		case *perfdata.Comm:
//			...
//		}
//	}
//	if err := r.Err(); err != nil { ... }
//
// Every length read from the input is checked before use, and memory
// grows only with the input's size, so malformed input gives an error
// naming the offset, never a panic or a hang. Records come in file order;
// perf sorts them by time before use, and so should a caller that cares.
//
// In pipe mode the records that carry header data (HEADER_ATTR,
// HEADER_FEATURE, EVENT_UPDATE, HEADER_TRACING_DATA, HEADER_BUILD_ID) are
// folded into Events and Feature instead of being returned; those before
// the first other record are read when the Reader is made.
// Records of perf record -z (PERF_RECORD_COMPRESSED, zstd) are returned
// as Unknown, not decompressed.
type Reader struct {
	name   string
	pipe   bool
	closer io.Closer

	events []Event
	byID   map[uint64]int
	feats  map[Feature][]byte

	in     *bufio.Reader // the records
	off    int64         // offset of the next record in the file or stream
	end    int64         // file mode: end of the data section; pipe mode: -1
	budget int64         // pipe mode: bytes that payloads outside records may still take

	pending    []byte // pipe mode: a record read ahead while reading the header records
	pendingOff int64

	rec    Record
	raw    []byte
	recOff int64
	err    error
	done   bool

	only  map[RecordType]bool // if set, the kernel record types Next returns
	reuse bool                // read kernel records into buf
	buf   []byte
}

// Only makes Next return only kernel records of the given types (and
// every record of perf's own types, which may carry header data) and pass
// over the others without decoding them: a reader that wants the few
// side-band records of a file of samples pays little for the samples.
func (r *Reader) Only(types ...RecordType) {
	r.only = make(map[RecordType]bool, len(types))
	for _, t := range types {
		r.only[t] = true
	}
}

// ReuseBuffer makes Next read every kernel record into one buffer, saving
// an allocation per record: the Record and Raw that Next gives are then
// valid only until the next call.
func (r *Reader) ReuseBuffer() { r.reuse = true }

// Limits on what a file may ask for.
const (
	maxEvents = 1 << 16
)

// Open opens the perf.data at path, in file or pipe mode.
func Open(path string) (*Reader, error) {
	f, st, err := safefile.OpenStat(path)
	if err != nil {
		return nil, err
	}
	r, err := newReader(f, st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads a perf.data of size bytes from ra, in file or pipe mode.
func NewReader(ra io.ReaderAt, size int64) (*Reader, error) {
	return newReader(ra, size, "perf.data")
}

func newReader(ra io.ReaderAt, size int64, name string) (*Reader, error) {
	if size < 0 {
		return nil, fmt.Errorf("%s: negative size %d", name, size)
	}
	if size < pipeHeaderSize {
		// Not even perf's magic and header size: an empty file, or one
		// cut before its header was written.
		return nil, fmt.Errorf("%s: not a perf.data file: %d bytes, shorter than any perf.data header", name, size)
	}
	head, err := readAt(ra, size, 0, pipeHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	hsize, err := checkMagic(head)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if hsize == pipeHeaderSize {
		return newPipeReader(io.NewSectionReader(ra, 0, size), name)
	}
	r := &Reader{name: name, byID: map[uint64]int{}, feats: map[Feature][]byte{}}
	if err := r.readFileHeader(ra, size, int(hsize)); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// noEOF turns a premature EOF into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readAt reads n bytes at off, which must lie inside a file of size bytes.
func readAt(ra io.ReaderAt, size int64, off uint64, n uint64) ([]byte, error) {
	if !(section{off, n}).within(size) {
		return nil, fmt.Errorf("%d bytes at %d beyond the end of the file (%d bytes)", n, off, size)
	}
	b := make([]byte, n)
	m, err := ra.ReadAt(b, int64(off))
	if m == len(b) { // io.ReaderAt may add io.EOF to a full read at the end
		return b, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return nil, noEOF(err)
}

// readFileHeader reads the header, the attrs with their ids, and the
// feature sections of a file-mode perf.data, as perf_session__read_header.
func (r *Reader) readFileHeader(ra io.ReaderAt, size int64, hsize int) error {
	hb, err := readAt(ra, size, 0, uint64(hsize))
	if err != nil {
		return fmt.Errorf("header: %w", err)
	}
	h, err := parseFileHeader(hb, size)
	if err != nil {
		return err
	}
	// perf reads nr_attrs = attrs.size / attr_size entries one after the
	// other, each attr of its own attr.size, then its ids section.
	nattrs := h.Attrs.Size / h.AttrSize
	if nattrs > maxEvents {
		return fmt.Errorf("attrs: %d events", nattrs)
	}
	pos := h.Attrs.Offset
	idBudget := uint64(size) / 8 // all ids together fit in the file
	for i := uint64(0); i < nattrs; i++ {
		sb, err := readAt(ra, size, pos, 8)
		if err != nil {
			return fmt.Errorf("attr %d: %w", i, err)
		}
		asize := uint64(le.Uint32(sb[4:])) // size
		if asize == 0 {
			asize = AttrSizeVer0
		}
		if asize < AttrSizeVer0 || asize > maxAttrSize {
			return fmt.Errorf("attr %d at %d: size %d out of range", i, pos, asize)
		}
		ab, err := readAt(ra, size, pos, asize+fileAttrExtra)
		if err != nil {
			return fmt.Errorf("attr %d: %w", i, err)
		}
		ev := Event{Attr: decodeAttr(ab[:min(asize, attrSizeVer8)])}
		d := &decoder{b: ab[asize:]}
		ids := section{d.u64(), d.u64()} // ids
		if ids.Size/8 > idBudget {
			return fmt.Errorf("attr %d: %d ids exceed the file", i, ids.Size/8)
		}
		idBudget -= ids.Size / 8
		ib, err := readAt(ra, size, ids.Offset, ids.Size/8*8)
		if err != nil {
			return fmt.Errorf("attr %d ids: %w", i, err)
		}
		ev.IDs = (&decoder{b: ib}).u64s(nil, len(ib)/8)
		r.addEvent(ev)
		pos += asize + fileAttrExtra
	}
	if err := r.readFeatures(ra, size, &h); err != nil {
		return err
	}
	if desc, ok := r.feats[FeatEventDesc]; ok {
		r.nameEvents(desc)
	}
	r.off, r.end = int64(h.Data.Offset), int64(h.Data.end())
	r.in = bufio.NewReaderSize(io.NewSectionReader(ra, r.off, int64(h.Data.Size)), int(min(h.Data.Size, 64<<10)))
	return nil
}

// readFeatures reads the feature sections: a perf_file_section per set
// bit, in ascending order, at the end of the data section.
func (r *Reader) readFeatures(ra io.ReaderAt, size int64, h *fileHeader) error {
	n := h.featureCount()
	if n == 0 {
		return nil
	}
	table, err := readAt(ra, size, h.Data.end(), uint64(16*n))
	if err != nil {
		return fmt.Errorf("feature table: %w", err)
	}
	d := &decoder{b: table}
	budget := uint64(size) // all sections together fit in the file
	for bit := 0; bit < featureBits; bit++ {
		if !h.hasFeature(bit) {
			continue
		}
		s := section{d.u64(), d.u64()}
		if s.Size > budget {
			return fmt.Errorf("feature %v: %d bytes exceed the file", Feature(bit), s.Size)
		}
		budget -= s.Size
		b, err := readAt(ra, size, s.Offset, s.Size)
		if err != nil {
			return fmt.Errorf("feature %v: %w", Feature(bit), err)
		}
		r.feats[Feature(bit)] = b
	}
	return nil
}

func (r *Reader) addEvent(ev Event) {
	r.events = append(r.events, ev)
	for _, id := range ev.IDs {
		if _, dup := r.byID[id]; !dup {
			r.byID[id] = len(r.events) - 1
		}
	}
}

// nameEvents names the events from an EVENT_DESC payload, by index as
// perf does; a malformed one names nothing (DecodeEventDesc says why).
func (r *Reader) nameEvents(desc []byte) {
	list, err := DecodeEventDesc(desc)
	if err != nil {
		return
	}
	for i := range list {
		if i < len(r.events) && r.events[i].Name == "" {
			r.events[i].Name = list[i].Name
		}
	}
}

// Pipe reports whether the input is in pipe mode.
func (r *Reader) Pipe() bool { return r.pipe }

// Events returns the events (one per attr), in file order. In pipe mode
// events may be added while reading.
func (r *Reader) Events() []Event { return r.events }

// Feature returns the payload of feature section f, if present.
func (r *Reader) Feature(f Feature) ([]byte, bool) {
	b, ok := r.feats[f]
	return b, ok
}

// Features lists the feature sections present, in ascending order.
func (r *Reader) Features() []Feature { return slices.Sorted(maps.Keys(r.feats)) }

// Next advances to the next record, which Record returns. It returns false
// at the end of the data or on an error, which Err then returns.
func (r *Reader) Next() bool {
	r.rec, r.raw = nil, nil
	for r.err == nil && !r.done {
		raw, off, err := r.readRecord()
		if err == io.EOF {
			r.done = true
			break
		}
		if err == nil && r.pipe {
			var folded bool
			if folded, err = r.fold(raw); err == nil && folded {
				continue
			}
		}
		var rec Record
		if err == nil {
			rec, err = r.decode(raw)
		}
		if err != nil {
			r.err = fmt.Errorf("%s: record at offset %#x: %w", r.name, off, err)
			break
		}
		r.rec, r.raw, r.recOff = rec, raw, off
		return true
	}
	return false
}

// Record returns the record Next advanced to.
func (r *Reader) Record() Record { return r.rec }

// Raw returns the current record's bytes as in the file, header included,
// ready for Writer.WriteRecord.
func (r *Reader) Raw() []byte { return r.raw }

// Offset returns the current record's offset in the file or stream.
func (r *Reader) Offset() int64 { return r.recOff }

// Err returns the error that stopped Next, or nil at a clean end.
func (r *Reader) Err() error { return r.err }

// Close closes the file if the Reader was made by Open.
func (r *Reader) Close() error {
	if r.closer != nil {
		return r.closer.Close()
	}
	return nil
}

// readRecord reads the next whole record and returns it with its offset,
// or io.EOF at the end of the data.
func (r *Reader) readRecord() ([]byte, int64, error) {
	if r.pending != nil {
		raw, off := r.pending, r.pendingOff
		r.pending = nil
		if !r.skipped(RecordType(le.Uint32(raw))) {
			return raw, off, nil
		}
	}
	for {
		off := r.off
		if r.end >= 0 && off == r.end {
			return nil, off, io.EOF
		}
		var hdr [recordHeaderSize]byte
		if n, err := io.ReadFull(r.in, hdr[:]); err != nil {
			if err == io.EOF && n == 0 && r.end < 0 {
				return nil, off, io.EOF
			}
			return nil, off, fmt.Errorf("record header: %w", noEOF(err))
		}
		typ := RecordType(le.Uint32(hdr[:]))
		size := int(le.Uint16(hdr[6:]))
		if size < recordHeaderSize {
			return nil, off, fmt.Errorf("%v record: size %d is smaller than its header", typ, size)
		}
		if r.end >= 0 && int64(size) > r.end-off {
			return nil, off, fmt.Errorf("%v record of %d bytes runs past the end of the data at %#x", typ, size, r.end)
		}
		if r.skipped(typ) {
			if _, err := r.in.Discard(size - recordHeaderSize); err != nil {
				return nil, off, fmt.Errorf("%v record of %d bytes: %w", typ, size, noEOF(err))
			}
			r.off += int64(size)
			continue
		}
		var raw []byte
		if r.reuse && typ < RecordUserTypeStart {
			if cap(r.buf) < size {
				r.buf = make([]byte, size, max(size, 1<<14))
			}
			raw = r.buf[:size]
		} else {
			raw = make([]byte, size)
		}
		copy(raw, hdr[:])
		if _, err := io.ReadFull(r.in, raw[recordHeaderSize:]); err != nil {
			return nil, off, fmt.Errorf("%v record of %d bytes: %w", typ, size, noEOF(err))
		}
		r.off += int64(size)
		if typ == RecordAuxtrace {
			if err := r.skipAuxtrace(raw); err != nil {
				return nil, off, err
			}
		}
		return raw, off, nil
	}
}

// skipped tells whether Only excludes records of type typ.
func (r *Reader) skipped(typ RecordType) bool {
	return r.only != nil && typ < RecordUserTypeStart && !r.only[typ]
}

// skipAuxtrace skips the AUX area data that follows a PERF_RECORD_AUXTRACE
// (struct perf_record_auxtrace: header, u64 size, ...) outside its size.
func (r *Reader) skipAuxtrace(raw []byte) error {
	d := &decoder{b: raw[recordHeaderSize:]}
	n := d.u64() // size
	if d.err != nil {
		return fmt.Errorf("AUXTRACE: %w", d.err)
	}
	if r.end >= 0 && n > uint64(r.end-r.off) {
		return fmt.Errorf("AUXTRACE data of %d bytes runs past the end of the data", n)
	}
	if n > 1<<62 {
		return fmt.Errorf("AUXTRACE data of %d bytes", n)
	}
	m, err := io.CopyN(io.Discard, r.in, int64(n))
	r.off += m
	if err != nil {
		return fmt.Errorf("AUXTRACE data of %d bytes: %w", n, noEOF(err))
	}
	return nil
}

// decode decodes raw with the layout of the event it belongs to.
func (r *Reader) decode(raw []byte) (Record, error) {
	typ := RecordType(le.Uint32(raw))
	if typ >= RecordUserTypeStart {
		return decodeRecord(raw, &Attr{}, -1)
	}
	if len(r.events) == 0 {
		if typ == RecordSample {
			return nil, errors.New("SAMPLE before any event attr")
		}
		return decodeRecord(raw, &Attr{}, -1)
	}
	ev := r.eventOf(raw)
	a := &r.events[max(ev, 0)].Attr
	return decodeRecord(raw, a, ev)
}

// eventOf finds the event of a kernel record as perf's evlist__event2evsel:
// the only one, or the one whose ID the record carries; -1 if none
// matches, 0 for a record with ID 0 (perf's synthesized records).
func (r *Reader) eventOf(raw []byte) int {
	if len(r.events) == 1 {
		return 0
	}
	first := &r.events[0].Attr
	body := raw[recordHeaderSize:]
	var id uint64
	if RecordType(le.Uint32(raw)) == RecordSample {
		off := sampleIDOffset(first.SampleType)
		if off < 0 || off+8 > len(body) {
			return -1
		}
		id = le.Uint64(body[off:])
	} else {
		// perf's is_pos: the id's place counted from the record's end.
		if first.Flags&FlagSampleIDAll == 0 {
			return 0
		}
		back := 0
		switch st := first.SampleType; {
		case st&SampleIdentifier != 0:
			back = 8
		case st&SampleID != 0: // then STREAM_ID and CPU follow it
			back = 8
			if st&SampleStreamID != 0 {
				back += 8
			}
			if st&SampleCPU != 0 {
				back += 8
			}
		default:
			return 0
		}
		if back > len(body) {
			return 0
		}
		id = le.Uint64(body[len(body)-back:])
	}
	if id == 0 {
		return 0
	}
	if ev, ok := r.byID[id]; ok {
		return ev
	}
	return -1
}
