package rubystack

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// A memory snapshot file holds what a walk read from a process, so the same
// walk can be replayed without it:
//
//	"rubyperf-memory 1\n"
//	one line of JSON: SavedHeader
//	then regions: address (u64 LE), length (u32 LE), bytes
const memoryMagic = "rubyperf-memory 1\n"

// Bounds on a memory snapshot file.
const (
	maxSavedRegions = 1 << 20
	maxSavedBytes   = 256 << 20
	maxHeaderBytes  = 64 << 10
)

// SavedHeader says which Ruby and which anchors a memory snapshot belongs to.
type SavedHeader struct {
	PID           int    `json:"pid"`
	Version       string `json:"version"`
	Arch          string `json:"arch"`
	GlobalSymbols uint64 `json:"global_symbols"`
	VMPtr         uint64 `json:"vm_ptr"`
	ShapeTree     uint64 `json:"shape_tree"`
	// ShapeTreeStruct: ShapeTree is the address of the shape tree itself
	// (rb_shape_tree, 4.0+), not of a pointer to it.
	ShapeTreeStruct bool `json:"shape_tree_struct,omitempty"`
}

// RecordingMemory passes reads through to Inner and keeps what they returned.
type RecordingMemory struct {
	Inner   Memory
	regions map[uint64][]byte
	bytes   int
}

func (m *RecordingMemory) ReadAt(p []byte, addr uint64) error {
	if err := m.Inner.ReadAt(p, addr); err != nil {
		return err
	}
	if m.regions == nil {
		m.regions = map[uint64][]byte{}
	}
	if old, ok := m.regions[addr]; !ok || len(old) < len(p) {
		if m.bytes+len(p) > maxSavedBytes {
			return fmt.Errorf("recording: more than %d bytes", maxSavedBytes)
		}
		m.regions[addr] = append([]byte(nil), p...)
		m.bytes += len(p)
	}
	return nil
}

// Save writes the recording with its header.
func (m *RecordingMemory) Save(w io.Writer, h SavedHeader) error {
	bw := bufio.NewWriter(w)
	hdr, err := json.Marshal(h)
	if err != nil {
		return err
	}
	bw.WriteString(memoryMagic)
	bw.Write(hdr)
	bw.WriteByte('\n')
	addrs := make([]uint64, 0, len(m.regions))
	for a := range m.regions {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	var rec [12]byte
	for _, a := range addrs {
		b := m.regions[a]
		binary.LittleEndian.PutUint64(rec[0:], a)
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(b)))
		bw.Write(rec[:])
		bw.Write(b)
	}
	return bw.Flush()
}

// SavedMemory serves reads from a memory snapshot file.
type SavedMemory struct {
	Header  SavedHeader
	regions []savedRegion // sorted by address
}

type savedRegion struct {
	addr uint64
	data []byte
}

// LoadMemory reads a memory snapshot file, refusing malformed or oversized ones.
func LoadMemory(r io.Reader) (*SavedMemory, error) {
	br := bufio.NewReader(io.LimitReader(r, maxSavedBytes+maxHeaderBytes+int64(len(memoryMagic))+12*maxSavedRegions))
	magic := make([]byte, len(memoryMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != memoryMagic {
		return nil, errors.New("memory snapshot: bad magic")
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("memory snapshot: header: %w", err)
	}
	m := &SavedMemory{}
	if err := json.Unmarshal(line, &m.Header); err != nil {
		return nil, fmt.Errorf("memory snapshot: header: %w", err)
	}
	total := 0
	var rec [12]byte
	for {
		if _, err := io.ReadFull(br, rec[:]); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("memory snapshot: region %d: %w", len(m.regions), err)
		}
		addr, n := binary.LittleEndian.Uint64(rec[0:]), int(binary.LittleEndian.Uint32(rec[8:]))
		if len(m.regions) >= maxSavedRegions || n > maxSavedBytes-total {
			return nil, errors.New("memory snapshot: too large")
		}
		if addr+uint64(n) < addr {
			return nil, fmt.Errorf("memory snapshot: region at %#x wraps around", addr)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, fmt.Errorf("memory snapshot: region at %#x: %w", addr, err)
		}
		total += n
		m.regions = append(m.regions, savedRegion{addr, data})
	}
	sort.Slice(m.regions, func(i, j int) bool { return m.regions[i].addr < m.regions[j].addr })
	return m, nil
}

// maxOverlap bounds how many earlier regions a read looks back through:
// recorded reads overlap only a little (an env read and a word inside it).
const maxOverlap = 64

// ReadAt serves a read that lies inside one recorded region.
func (m *SavedMemory) ReadAt(p []byte, addr uint64) error {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].addr > addr }) - 1
	for k := 0; i >= 0 && k < maxOverlap; i, k = i-1, k+1 {
		r := m.regions[i]
		off := addr - r.addr
		if off <= uint64(len(r.data)) && uint64(len(p)) <= uint64(len(r.data))-off {
			copy(p, r.data[off:])
			return nil
		}
	}
	return fmt.Errorf("memory snapshot: %d bytes at %#x were not recorded", len(p), addr)
}

// ReplayReader reads a saved memory snapshot with layout l, as NewReader
// would have read the live process.
func ReplayReader(m *SavedMemory, l *rubybuild.Layout) *Reader {
	h := m.Header
	r := newReader(h.PID, m, l, h.GlobalSymbols, h.VMPtr, h.ShapeTree)
	r.shapesStruct = h.ShapeTreeStruct
	return r
}

// Anchors of a Reader, for saving a snapshot header.
func (r *Reader) SavedHeader() SavedHeader {
	return SavedHeader{PID: r.PID, Version: r.Layout.Version.String(), Arch: r.Layout.Arch,
		GlobalSymbols: r.syms.addr, VMPtr: r.vmPtr, ShapeTree: r.shapes, ShapeTreeStruct: r.shapesStruct}
}
