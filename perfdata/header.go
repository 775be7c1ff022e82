package perfdata

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Magic numbers: the first 8 bytes of a perf.data, in both modes.
const (
	magic2        = 0x32454c4946524550 // "PERFILE2" read as a little-endian u64
	magic2Swapped = 0x50455246494c4532 // "PERFILE2" written by a big-endian host
	magic1        = 0x454c494646524550 // "PERFFILE": version 1, unsupported by perf itself since 2012
)

// Header sizes (perf_file_header.size / perf_pipe_file_header.size).
const (
	fileHeaderSize    = 104 // struct perf_file_header with the 256-bit feature bitmap
	oldFileHeaderSize = 72  // struct perf_file_header before adds_features
	pipeHeaderSize    = 16  // struct perf_pipe_file_header
	fileAttrExtra     = 16  // perf_file_attr = attr + struct perf_file_section ids
	featureBits       = 256 // HEADER_FEAT_BITS
)

// section is struct perf_file_section.
type section struct {
	Offset uint64 // offset
	Size   uint64 // size
}

// end is the offset just past s, saturating instead of wrapping.
func (s section) end() uint64 {
	if s.Size > math.MaxUint64-s.Offset {
		return math.MaxUint64
	}
	return s.Offset + s.Size
}

// within says whether s lies inside a file of size bytes.
func (s section) within(size int64) bool {
	return s.Offset <= uint64(size) && s.Size <= uint64(size)-s.Offset
}

// fileHeader is struct perf_file_header (tools/perf/util/header.h).
type fileHeader struct {
	Magic      uint64                   // magic
	Size       uint64                   // size: of this header
	AttrSize   uint64                   // attr_size: of one perf_file_attr
	Attrs      section                  // attrs
	Data       section                  // data
	EventTypes section                  // event_types: unused since 2012, written as 0,0
	Features   [featureBits / 64]uint64 // adds_features: bitmap of feature sections
}

func (h *fileHeader) hasFeature(bit int) bool {
	return bit >= 0 && bit < featureBits && h.Features[bit/64]&(1<<(bit%64)) != 0
}

func (h *fileHeader) featureCount() int {
	n := 0
	for _, w := range h.Features {
		n += bits.OnesCount64(w)
	}
	return n
}

func (h *fileHeader) append(dst []byte) []byte {
	dst = le.AppendUint64(dst, h.Magic)
	dst = le.AppendUint64(dst, h.Size)
	dst = le.AppendUint64(dst, h.AttrSize)
	for _, s := range []section{h.Attrs, h.Data, h.EventTypes} {
		dst = le.AppendUint64(dst, s.Offset)
		dst = le.AppendUint64(dst, s.Size)
	}
	for _, w := range h.Features {
		dst = le.AppendUint64(dst, w)
	}
	return dst
}

// checkMagic reads the first 16 bytes common to both headers and returns
// perf_file_header.size (16 means pipe mode).
func checkMagic(b []byte) (uint64, error) {
	d := &decoder{b: b}
	m, size := d.u64(), d.u64()
	if d.err != nil {
		return 0, fmt.Errorf("header: %w", d.err)
	}
	switch m {
	case magic2:
	case magic2Swapped:
		return 0, errors.New("header: big-endian perf.data is not supported")
	case magic1:
		return 0, errors.New("header: version 1 perf.data (PERFFILE) is not supported")
	default:
		return 0, fmt.Errorf("header: bad magic %#x: not a perf.data file", m)
	}
	switch size {
	case pipeHeaderSize, fileHeaderSize, oldFileHeaderSize:
		return size, nil
	}
	return 0, fmt.Errorf("header: size %d, want %d, %d or %d", size, fileHeaderSize, oldFileHeaderSize, pipeHeaderSize)
}

// parseFileHeader decodes a file-mode header (72 or 104 bytes) and applies
// perf_file_header__read's checks plus bounds against the file size.
func parseFileHeader(b []byte, fileSize int64) (fileHeader, error) {
	var h fileHeader
	d := &decoder{b: b}
	h.Magic = d.u64()
	h.Size = d.u64()
	h.AttrSize = d.u64()
	h.Attrs = section{d.u64(), d.u64()}
	h.Data = section{d.u64(), d.u64()}
	h.EventTypes = section{d.u64(), d.u64()}
	if h.Size == fileHeaderSize {
		for i := range h.Features {
			h.Features[i] = d.u64()
		}
	}
	if d.err != nil {
		return h, fmt.Errorf("header: %w", d.err)
	}
	switch {
	case h.AttrSize < AttrSizeVer0+fileAttrExtra || h.AttrSize > maxAttrSize+fileAttrExtra:
		return h, fmt.Errorf("header: attr_size %d out of range", h.AttrSize)
	case h.Attrs.Offset < h.Size || h.Data.Offset < h.Size:
		return h, fmt.Errorf("header: attrs at %d or data at %d overlap the %d-byte header", h.Attrs.Offset, h.Data.Offset, h.Size)
	case !h.Attrs.within(fileSize):
		return h, fmt.Errorf("header: attrs [%d,+%d) beyond the end of the file (%d bytes)", h.Attrs.Offset, h.Attrs.Size, fileSize)
	case !h.Data.within(fileSize):
		return h, fmt.Errorf("header: data [%d,+%d) beyond the end of the file (%d bytes)", h.Data.Offset, h.Data.Size, fileSize)
	case h.Attrs.Size > 0 && h.Data.Size > 0 && h.Attrs.Offset < h.Data.end() && h.Data.Offset < h.Attrs.end():
		return h, errors.New("header: attrs and data sections overlap")
	}
	return h, nil
}
