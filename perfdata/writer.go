package perfdata

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
)

// Writer writes a file-mode perf.data that perf 6.1 opens: the 104-byte
// header; the attrs (128 bytes each, plus their ids section) and ids; the
// payloads of the feature sections set before the first record; the
// records; and at the end of the data, the feature section table and the
// payloads set later.
//
// Add every event with AddEvent, then write records with WriteRecord
// (verbatim kernel records) or Synthesize (records built from a struct),
// set feature sections with SetFeature at any time, and finish with Close.
// perf processes records in time order, so a thread's COMM and the MMAP2s
// its samples hit must carry earlier times (in their Trailer, which needs
// FlagSampleIDAll and SampleTime) than those samples. perf script shows
// symbols only for events with SampleIP (or SampleAddr).
//
// Nothing is lost on a failed write (a full disk, a file size limit): the
// Writer keeps every record that reached the file whole (retrying record
// by record when a large write fails), cuts the file after the last of
// them, returns the error from then on, and still makes the file valid on
// Close. Records are buffered (BufferSize), so a failure may surface only
// in Flush or Close. Flush writes the buffer and rewrites the header, so the
// file is valid, without feature sections, should the process die after
// it. Close writes the feature table; if the table and the late payloads
// do not fit, it leaves out the late payloads, the largest first, but
// those KeepFeature names; then it gives back the latest records, as few
// as make room for what is left (those kept, and the 16-byte entries of
// the payloads placed before the data: EVENT_DESC, so perf still prints
// the event names, and whatever else was set before the first record),
// leaving out the kept ones too, the largest first, while that cannot be
// done; or it writes none. It always rewrites the header, which needs no
// new space. The file
// must not be in append mode; the Writer never closes it. A Writer is not
// safe for concurrent use.
type Writer struct {
	f        writerFile
	events   []Event
	features map[Feature][]byte
	placed   map[Feature]section // payloads written before the data
	started  bool                // events frozen: no more AddEvent
	attrsOK  bool                // the attrs and ids are in the file
	closed   bool
	dataOff  int64 // data section offset
	dataSize int64 // bytes of whole records in the file
	records  int   // whole records in the file
	buf      []byte
	bufRecs  int
	err      error // the first failed write: later writes are refused
	kept     map[Feature]bool
	written  []Feature // by Close
	// ends are the data offsets just past the latest records in the file
	// (at most maxRecordEnds, ascending), where Close may cut the data to
	// give room to the features kept.
	ends []int64

	// BufferSize is how many bytes of records are held before they are
	// written (0: 64 KiB).
	BufferSize int
}

// writerFile is what Writer needs of an *os.File.
type writerFile interface {
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
}

const writeBufferSize = 64 << 10

// maxRecordEnds bounds Writer.ends: how many of the latest records Close
// may give back to the features kept.
const maxRecordEnds = 1 << 13

// bufferSize is BufferSize or its default.
func (w *Writer) bufferSize() int {
	if w.BufferSize > 0 {
		return w.BufferSize
	}
	return writeBufferSize
}

// NewWriter starts a perf.data in f, which it empties.
func NewWriter(f *os.File) (*Writer, error) {
	return newWriter(f)
}

func newWriter(f writerFile) (*Writer, error) {
	w := &Writer{f: f, features: map[Feature][]byte{}, placed: map[Feature]section{}, kept: map[Feature]bool{},
		dataOff: fileHeaderSize}
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("truncate: %w", bare(err))
	}
	if err := w.writeHeader(w.header()); err != nil {
		return nil, err
	}
	return w, nil
}

// AddEvent adds an event: its attr (written with Size = AttrSize), its
// name, and the sample IDs of its kernel instances (may be empty when it
// is the only event). The names go into the EVENT_DESC feature, so perf
// prints them (e.g. "ruby-cpu") instead of names it derives from the
// attr; an empty name leaves that to perf unless another event is named.
// perf maps samples to events by ID, so with several events every one
// needs SampleIdentifier (or SampleID at the same offset) and the same
// FlagSampleIDAll. All events must be added before the first record.
func (w *Writer) AddEvent(attr Attr, name string, ids []uint64) error {
	if w.started || w.closed {
		return errors.New("add event: records already written")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("add event %q: name %w", name, errNoNUL)
	}
	attr.Size = AttrSize
	if _, err := appendAttr(nil, &attr); err != nil {
		return fmt.Errorf("add event %q: %w", name, err)
	}
	seen := map[uint64]bool{}
	for _, e := range w.events {
		for _, id := range e.IDs {
			seen[id] = true
		}
	}
	for _, id := range ids {
		if seen[id] {
			return fmt.Errorf("add event %q: id %d is used twice", name, id)
		}
		seen[id] = true
	}
	if len(w.events) > 0 {
		first := &w.events[0].Attr
		if err := compatible(first, &attr); err != nil {
			return fmt.Errorf("add event %q: %w", name, err)
		}
	}
	w.events = append(w.events, Event{Attr: attr, Name: name, IDs: append([]uint64(nil), ids...)})
	return nil
}

// compatible applies perf's evlist__valid_sample_type and
// evlist__valid_sample_id_all to a second event b beside the first a.
func compatible(a, b *Attr) error {
	for _, x := range []*Attr{a, b} {
		if sampleIDOffset(x.SampleType) < 0 {
			return errors.New("several events need PERF_SAMPLE_IDENTIFIER or PERF_SAMPLE_ID in each")
		}
	}
	if sampleIDOffset(a.SampleType) != sampleIDOffset(b.SampleType) {
		return errors.New("the sample id is at a different offset than in the first event (use PERF_SAMPLE_IDENTIFIER)")
	}
	if a.Flags&FlagSampleIDAll != b.Flags&FlagSampleIDAll {
		return errors.New("sample_id_all differs from the first event")
	}
	if a.Flags&FlagSampleIDAll != 0 && a.SampleType&SampleIdentifier == 0 &&
		a.SampleType&trailerTypes != b.SampleType&trailerTypes {
		return errors.New("the sample_id trailer differs from the first event's (use PERF_SAMPLE_IDENTIFIER)")
	}
	return nil
}

const trailerTypes = SampleTID | SampleTime | SampleID | SampleStreamID | SampleCPU | SampleIdentifier

// Events returns the events added so far; the caller must not modify them.
func (w *Writer) Events() []Event { return w.events }

// Written says whether Close wrote feature section f (and the header
// that lists it).
func (w *Writer) Written(f Feature) bool { return slices.Contains(w.written, f) }

// KeepFeature says that feature f, when set, is worth more than the
// latest records: should Close find no room for it on a full disk, it
// gives back as many of the latest records as make room (at most the
// last 8,192), where others are left out.
func (w *Writer) KeepFeature(f Feature) { w.kept[f] = true }

// SetFeature sets the payload of feature section f (1..255), replacing any
// earlier one; nil data removes it. Payloads set before the first record
// are written then, ahead of the data, so they survive a full disk; later
// ones are written by Close. EVENT_DESC is built from the events unless
// set here. Encode the known features with EncodeString, EncodeStrings,
// EncodeNRCPUs, EncodeEventDesc and EncodeBuildIDs.
func (w *Writer) SetFeature(f Feature, data []byte) error {
	if !f.valid() {
		return fmt.Errorf("set feature: bit %d out of range 1..%d", int(f), featureBits-1)
	}
	if w.closed {
		return errors.New("set feature: writer closed")
	}
	delete(w.placed, f)
	if data == nil {
		delete(w.features, f)
	} else {
		w.features[f] = append([]byte{}, data...)
	}
	return nil
}

// WriteRecord appends one whole record exactly as the kernel writes it to
// a perf ring buffer (perf_event_header, then the body; header.size ==
// len(raw)), e.g. a SAMPLE, LOST, COMM or MMAP2 copied from a ring. Its
// layout must match the attr of the event it came from.
func (w *Writer) WriteRecord(raw []byte) error {
	if err := w.ready(); err != nil {
		return err
	}
	if err := checkRawRecord(raw); err != nil {
		return fmt.Errorf("write record: %w", err)
	}
	w.buf = append(w.buf, raw...)
	return w.added()
}

// Synthesize encodes rec as the kernel would for event (an index into the
// added events) and writes it: a SAMPLE with the fields of the event's
// SampleType, other kernel records with a sample_id trailer (rec's
// Trailer: time, cpu, ...) when the event has FlagSampleIDAll. Use it for
// records the kernel did not write, such as a COMM and MMAP2 per thread
// and mapping that existed before recording started.
func (w *Writer) Synthesize(event int, rec Record) error {
	if err := w.ready(); err != nil {
		return err
	}
	if rec == nil || reflect.ValueOf(rec).IsNil() {
		return errors.New("synthesize: nil record")
	}
	if event < 0 || event >= len(w.events) {
		return fmt.Errorf("synthesize %v: no event %d", rec.Type(), event)
	}
	var err error
	if w.buf, err = appendRecord(w.buf, &w.events[event].Attr, rec); err != nil {
		return fmt.Errorf("synthesize: %w", err)
	}
	return w.added()
}

// ready checks that records may be written, writing the attrs first.
func (w *Writer) ready() error {
	switch {
	case w.closed:
		return errors.New("write record: writer closed")
	case w.err != nil:
		return w.err
	case !w.started:
		return w.start()
	}
	return nil
}

// added counts a record just appended to buf, flushing a full buffer.
func (w *Writer) added() error {
	w.bufRecs++
	if len(w.buf) >= w.bufferSize() {
		return w.flushRecords()
	}
	return nil
}

// start freezes the events and writes, after the header, the attrs, their
// ids, and the payloads of the feature sections set so far (EVENT_DESC
// included); the data follows. Placing payloads before the data means
// that after a full disk only their 16-byte table entries must still fit.
func (w *Writer) start() error {
	if len(w.events) == 0 {
		return errors.New("write record: no events added")
	}
	w.started = true
	if _, ok := w.features[FeatEventDesc]; !ok {
		for _, e := range w.events {
			if e.Name != "" {
				desc, _ := EncodeEventDesc(w.events) // the attrs were checked by AddEvent
				w.features[FeatEventDesc] = desc
				break
			}
		}
	}
	attrsSize := int64(len(w.events)) * (AttrSize + fileAttrExtra)
	idsOff := fileHeaderSize + attrsSize
	var b, ids []byte
	for i := range w.events {
		e := &w.events[i]
		b, _ = appendAttr(b, &e.Attr)                           // attr (checked by AddEvent)
		b = le.AppendUint64(b, uint64(idsOff)+uint64(len(ids))) // ids.offset
		b = le.AppendUint64(b, uint64(8*len(e.IDs)))            // ids.size
		for _, id := range e.IDs {
			ids = le.AppendUint64(ids, id)
		}
	}
	b = append(b, ids...)
	for _, f := range w.featureList() {
		data := w.features[f]
		w.placed[f] = section{uint64(fileHeaderSize + len(b)), uint64(len(data))}
		b = append(b, data...)
	}
	b = append(b, make([]byte, align8(len(b))-len(b))...)
	if _, err := w.f.WriteAt(b, fileHeaderSize); err != nil {
		w.err = fmt.Errorf("write attrs: %w", bare(err))
		return w.err
	}
	w.attrsOK = true
	w.dataOff = fileHeaderSize + int64(len(b))
	return nil
}

// flushRecords writes the buffered records. On failure it keeps the whole
// records that reached the file, cuts off the rest, and remembers the error.
func (w *Writer) flushRecords() error {
	if len(w.buf) == 0 {
		return w.err
	}
	n, err := w.f.WriteAt(w.buf, w.dataOff+w.dataSize)
	if err == nil && n < len(w.buf) {
		err = errors.New("short write")
	}
	if err != nil {
		err = bare(err)
		keep, recs := wholeRecords(w.buf[:n])
		// A large write can fail whole where smaller ones still fit (tmpfs
		// allocating large folios does): write the rest record by record.
		for keep < len(w.buf) {
			size := int(le.Uint16(w.buf[keep+6:]))
			if m, err := w.f.WriteAt(w.buf[keep:keep+size], w.dataOff+w.dataSize+int64(keep)); err != nil || m < size {
				break
			}
			keep += size
			recs++
		}
		w.noteEnds(w.buf[:keep], w.dataSize)
		w.dataSize += int64(keep)
		w.records += recs
		dropped := w.bufRecs - recs
		w.buf, w.bufRecs = w.buf[:0], 0
		if terr := w.f.Truncate(w.dataOff + w.dataSize); terr != nil {
			err = fmt.Errorf("%w; truncate after the last whole record: %w", err, bare(terr))
		}
		w.err = fmt.Errorf("write records: %w (kept %d records, dropped %d)", err, w.records, dropped)
		return w.err
	}
	w.noteEnds(w.buf, w.dataSize)
	w.dataSize += int64(n)
	w.records += w.bufRecs
	w.buf, w.bufRecs = w.buf[:0], 0
	if cap(w.buf) > 4*w.bufferSize() {
		w.buf = nil // after one huge record
	}
	return nil
}

// noteEnds notes the ends of the records in b, whole records written at
// data offset off, keeping the latest maxRecordEnds.
func (w *Writer) noteEnds(b []byte, off int64) {
	eachWholeRecord(b, func(end int) { w.ends = append(w.ends, off+int64(end)) })
	if over := len(w.ends) - maxRecordEnds; over > 0 {
		w.ends = append(w.ends[:0], w.ends[over:]...)
	}
}

// wholeRecords returns the length and count of the whole records at the
// start of b, a run of records as written.
func wholeRecords(b []byte) (n, count int) {
	return eachWholeRecord(b, nil)
}

// eachWholeRecord walks the whole records at the start of b, calling fn
// (if not nil) with the end of each, and returns their length and count.
func eachWholeRecord(b []byte, fn func(end int)) (n, count int) {
	for n+recordHeaderSize <= len(b) {
		size := int(le.Uint16(b[n+6:]))
		if size < recordHeaderSize || size > len(b)-n {
			break
		}
		n += size
		count++
		if fn != nil {
			fn(n)
		}
	}
	return n, count
}

// Flush writes the buffered records and rewrites the header, so the file
// is a valid perf.data (with no feature sections yet) holding every record
// written so far.
func (w *Writer) Flush() error {
	if w.closed {
		return errors.New("flush: writer closed")
	}
	if !w.started {
		if err := w.start(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	err := w.flushRecords()
	if !w.attrsOK {
		return err
	}
	return errors.Join(err, w.writeHeader(w.header()))
}

// Records returns how many records are in the file (not counting
// buffered ones) and how many bytes they take.
func (w *Writer) Records() (count int, bytes int64) { return w.records, w.dataSize }

// Close writes the buffered records, the feature sections and the final
// header. It returns any error that lost records or features, even one
// already returned by WriteRecord; the file is still a valid perf.data
// with every record kept unless the header itself could not be written.
// Close does not close the file.
func (w *Writer) Close() error {
	if w.closed {
		return errors.New("close: writer closed")
	}
	w.closed = true
	if !w.started {
		if err := w.start(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
	}
	if !w.attrsOK {
		return fmt.Errorf("close: %w; the file is not a valid perf.data", w.err)
	}
	w.flushRecords() // a failure is in w.err
	var errs []error
	if w.err != nil {
		errs = append(errs, w.err)
	}
	// The feature table goes at the end of the data. Try every feature;
	// then without the late payloads not kept, the largest first; then,
	// the latest records given back, with those kept; then only those
	// whose payloads start placed before the data.
	h := w.header()
	feats := w.featureList()
	var written []Feature
	var tried error
	gaveBack := false
	for len(feats) > 0 {
		featOff := w.dataOff + w.dataSize
		err := w.writeFeatures(featOff, feats)
		if err == nil {
			written = feats
			break
		}
		if tried == nil {
			tried = err
			errs = append(errs, err)
		}
		w.f.Truncate(featOff) // give back what the partial write took
		if i := w.largestLate(feats, false); i >= 0 {
			feats = slices.Delete(feats, i, i+1)
			continue
		}
		if !gaveBack {
			gaveBack = true
			if cut, n, ok := w.giveBack(w.featuresSize(feats)); ok {
				errs = append(errs, fmt.Errorf("cut the last %d records (%d bytes) to make room for the feature sections", n, cut))
				h = w.header()
				continue
			}
		}
		// No room even so: the largest kept one goes, and records are
		// given back again for the rest.
		if i := w.largestLate(feats, true); i >= 0 {
			feats = slices.Delete(feats, i, i+1)
			gaveBack = false
			continue
		}
		break
	}
	for _, f := range written {
		h.Features[f/64] |= 1 << (f % 64)
	}
	var lost []string
	for _, f := range w.featureList() {
		if !h.hasFeature(int(f)) {
			lost = append(lost, f.String())
		}
	}
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("feature sections not written: %s", strings.Join(lost, ", ")))
	}
	if err := w.writeHeader(h); err != nil {
		errs = append(errs, err)
	} else {
		w.written = written
	}
	if len(errs) > 0 {
		// One line: what failed first, then what was done about it.
		args := make([]any, len(errs))
		for i, e := range errs {
			args[i] = e
		}
		return fmt.Errorf("close: "+strings.Repeat("%w; ", len(errs)-1)+"%w", args...)
	}
	return nil
}

// bare is err without the name of the file (a PathError's): the Writer's
// file may have been renamed since it was opened, and its caller names
// it.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// largestLate is the index in feats of the largest payload not placed
// before the data, of those kept or of the others, or -1.
func (w *Writer) largestLate(feats []Feature, kept bool) int {
	best := -1
	for i, f := range feats {
		if _, placed := w.placed[f]; placed || w.kept[f] != kept {
			continue
		}
		if best < 0 || len(w.features[f]) > len(w.features[feats[best]]) {
			best = i
		}
	}
	return best
}

// featuresSize is how many bytes writeFeatures writes for feats.
func (w *Writer) featuresSize(feats []Feature) int64 {
	n := int64(16 * len(feats))
	for _, f := range feats {
		if _, placed := w.placed[f]; !placed {
			n += int64(len(w.features[f]))
		}
	}
	return n
}

// giveBack cuts the latest whole records from the file, as few as free
// room bytes at the end of the data; it returns the bytes and records
// cut, or false when that would take every record, or more than it knows
// the ends of.
func (w *Writer) giveBack(room int64) (cut int64, n int, ok bool) {
	want := w.dataSize - room
	i, _ := slices.BinarySearch(w.ends, want+1) // ends[:i] are ≤ want
	if want <= 0 || i == 0 {
		return 0, 0, false // not a record would be left, or not one known
	}
	end := w.ends[i-1]
	if w.f.Truncate(w.dataOff+end) != nil {
		return 0, 0, false
	}
	n = len(w.ends) - i
	cut = w.dataSize - end
	w.ends = w.ends[:i]
	w.dataSize, w.records = end, w.records-n
	return cut, n, true
}

// header is the file header for the records written so far, without features.
func (w *Writer) header() fileHeader {
	h := fileHeader{
		Magic:    magic2,
		Size:     fileHeaderSize,
		AttrSize: AttrSize + fileAttrExtra,
		Data:     section{uint64(w.dataOff), uint64(w.dataSize)},
	}
	h.Attrs = section{fileHeaderSize, 0}
	if w.attrsOK {
		h.Attrs.Size = uint64(len(w.events)) * (AttrSize + fileAttrExtra)
	}
	return h
}

func (w *Writer) writeHeader(h fileHeader) error {
	if _, err := w.f.WriteAt(h.append(nil), 0); err != nil {
		return fmt.Errorf("write header: %w", bare(err))
	}
	return nil
}

// featureList returns the features set, in ascending bit order.
func (w *Writer) featureList() []Feature { return slices.Sorted(maps.Keys(w.features)) }

// writeFeatures writes the section table at off (one perf_file_section per
// feature, ascending) followed by the payloads not placed before the data.
func (w *Writer) writeFeatures(off int64, feats []Feature) error {
	table := make([]byte, 0, 16*len(feats))
	var payload []byte
	pos := uint64(off) + uint64(16*len(feats))
	for _, f := range feats {
		s, ok := w.placed[f]
		if !ok {
			s = section{pos + uint64(len(payload)), uint64(len(w.features[f]))}
			payload = append(payload, w.features[f]...)
		}
		table = le.AppendUint64(table, s.Offset) // offset
		table = le.AppendUint64(table, s.Size)   // size
	}
	if _, err := w.f.WriteAt(append(table, payload...), off); err != nil {
		return fmt.Errorf("write feature sections: %w", bare(err))
	}
	return nil
}
