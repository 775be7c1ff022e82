package perfdata

import (
	"fmt"
	"strings"
)

// Feature is a bit of perf_file_header.adds_features: the index of an
// optional feature section (enum HEADER_* in tools/perf/util/header.h).
// Valid bits are 1 to 255. perf 6.1 knows bits 1 to 31; its readers
// (report, script) skip any other bit they find set, so bits well above 31
// (say 200 and up) are free for a tool's private data. Its writer does not:
// perf inject copies every bit set in its input and crashes on one it does
// not know (it indexes its table of feature writers with it), so a file
// meant for perf's tools to rewrite carries only bits KnownToPerf.
type Feature int

// Feature bits known to perf 6.1.
const (
	FeatTracingData   Feature = 1  // HEADER_TRACING_DATA
	FeatBuildID       Feature = 2  // HEADER_BUILD_ID: see EncodeBuildIDs
	FeatHostname      Feature = 3  // HEADER_HOSTNAME: a string, see EncodeString
	FeatOSRelease     Feature = 4  // HEADER_OSRELEASE: a string
	FeatVersion       Feature = 5  // HEADER_VERSION: a string (perf's version)
	FeatArch          Feature = 6  // HEADER_ARCH: a string (uname -m)
	FeatNRCPUs        Feature = 7  // HEADER_NRCPUS: see EncodeNRCPUs
	FeatCPUDesc       Feature = 8  // HEADER_CPUDESC: a string
	FeatCPUID         Feature = 9  // HEADER_CPUID: a string
	FeatTotalMem      Feature = 10 // HEADER_TOTAL_MEM: u64 kB
	FeatCmdline       Feature = 11 // HEADER_CMDLINE: see EncodeStrings
	FeatEventDesc     Feature = 12 // HEADER_EVENT_DESC: see EncodeEventDesc
	FeatCPUTopology   Feature = 13 // HEADER_CPU_TOPOLOGY
	FeatNUMATopology  Feature = 14 // HEADER_NUMA_TOPOLOGY
	FeatBranchStack   Feature = 15 // HEADER_BRANCH_STACK
	FeatPMUMappings   Feature = 16 // HEADER_PMU_MAPPINGS
	FeatGroupDesc     Feature = 17 // HEADER_GROUP_DESC
	FeatAuxtrace      Feature = 18 // HEADER_AUXTRACE
	FeatStat          Feature = 19 // HEADER_STAT
	FeatCache         Feature = 20 // HEADER_CACHE
	FeatSampleTime    Feature = 21 // HEADER_SAMPLE_TIME: u64 first, last
	FeatMemTopology   Feature = 22 // HEADER_MEM_TOPOLOGY
	FeatClockID       Feature = 23 // HEADER_CLOCKID
	FeatDirFormat     Feature = 24 // HEADER_DIR_FORMAT
	FeatBPFProgInfo   Feature = 25 // HEADER_BPF_PROG_INFO
	FeatBPFBTF        Feature = 26 // HEADER_BPF_BTF
	FeatCompressed    Feature = 27 // HEADER_COMPRESSED
	FeatCPUPMUCaps    Feature = 28 // HEADER_CPU_PMU_CAPS
	FeatClockData     Feature = 29 // HEADER_CLOCK_DATA
	FeatHybridTopo    Feature = 30 // HEADER_HYBRID_TOPOLOGY
	FeatPMUCaps       Feature = 31 // HEADER_PMU_CAPS
	featLastKnownPerf Feature = 32 // HEADER_LAST_FEATURE in perf 6.1
)

var featureNames = [...]string{
	"", "TRACING_DATA", "BUILD_ID", "HOSTNAME", "OSRELEASE", "VERSION", "ARCH", "NRCPUS",
	"CPUDESC", "CPUID", "TOTAL_MEM", "CMDLINE", "EVENT_DESC", "CPU_TOPOLOGY", "NUMA_TOPOLOGY",
	"BRANCH_STACK", "PMU_MAPPINGS", "GROUP_DESC", "AUXTRACE", "STAT", "CACHE", "SAMPLE_TIME",
	"MEM_TOPOLOGY", "CLOCKID", "DIR_FORMAT", "BPF_PROG_INFO", "BPF_BTF", "COMPRESSED",
	"CPU_PMU_CAPS", "CLOCK_DATA", "HYBRID_TOPOLOGY", "PMU_CAPS",
}

// String returns perf's name for f without HEADER_, e.g. "EVENT_DESC".
func (f Feature) String() string {
	if f > 0 && int(f) < len(featureNames) {
		return featureNames[f]
	}
	return fmt.Sprintf("feature %d", int(f))
}

func (f Feature) valid() bool { return f > 0 && f < featureBits }

// KnownToPerf says whether perf 6.1 knows feature f (see Feature).
func (f Feature) KnownToPerf() bool { return f > 0 && f < featLastKnownPerf }

// nameAlign is NAME_ALIGN: perf pads feature strings to a multiple of it.
const nameAlign = 64

func alignName(n int) int { return (n + nameAlign - 1) &^ (nameAlign - 1) }

// EncodeString encodes s as perf's do_write_string: u32 len, then s, a NUL
// and zero padding, len bytes in all, len a multiple of 64. This is the
// payload of HOSTNAME, OSRELEASE, VERSION, ARCH, CPUDESC and CPUID. Like a
// C string, s ends at its first NUL byte.
func EncodeString(s string) []byte { return appendString(nil, s) }

func appendString(dst []byte, s string) []byte {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	n := alignName(len(s) + 1)
	dst = le.AppendUint32(dst, uint32(n)) // len, including the NUL and padding
	dst = append(dst, s...)
	return append(dst, make([]byte, n-len(s))...)
}

// DecodeString decodes a string feature (do_read_string).
func DecodeString(data []byte) (string, error) {
	d := &decoder{b: data}
	s := readString(d)
	if d.err != nil {
		return "", fmt.Errorf("string: %w", d.err)
	}
	return s, nil
}

func readString(d *decoder) string {
	return cstring(d.bytes(int(d.u32()))) // len, string[len]
}

// EncodeStrings encodes a list of strings as perf's CMDLINE: u32 nr, then
// nr strings as EncodeString.
func EncodeStrings(list []string) []byte {
	b := le.AppendUint32(nil, uint32(len(list)))
	for _, s := range list {
		b = appendString(b, s)
	}
	return b
}

// DecodeStrings decodes a string list (CMDLINE).
func DecodeStrings(data []byte) ([]string, error) {
	d := &decoder{b: data}
	n := d.u32() // nr
	if d.err == nil && uint64(n) > uint64(d.left()/4) {
		return nil, fmt.Errorf("string list: %d strings in %d bytes", n, len(data))
	}
	list := make([]string, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		list = append(list, readString(d))
	}
	if d.err != nil {
		return nil, fmt.Errorf("string list: %w", d.err)
	}
	return list, nil
}

// NRCPUs is the NRCPUS feature in the order perf reads it.
type NRCPUs struct {
	Available uint32 // nr_cpus_avail: possible CPUs
	Online    uint32 // nr_cpus_online
}

// EncodeNRCPUs encodes the NRCPUS feature.
func EncodeNRCPUs(n NRCPUs) []byte {
	return le.AppendUint32(le.AppendUint32(nil, n.Available), n.Online)
}

// DecodeNRCPUs decodes the NRCPUS feature.
func DecodeNRCPUs(data []byte) (NRCPUs, error) {
	d := &decoder{b: data}
	n := NRCPUs{Available: d.u32(), Online: d.u32()}
	if d.err != nil {
		return NRCPUs{}, fmt.Errorf("nrcpus: %w", d.err)
	}
	return n, nil
}

// Event is one event of a perf.data: its attr, its name (as perf prints
// it, e.g. "cpu-clock:ppp" or "ruby-cpu"), and the sample IDs the kernel
// gave its instances (one per CPU or thread), which SAMPLE records carry
// in PERF_SAMPLE_ID / PERF_SAMPLE_IDENTIFIER.
type Event struct {
	Attr Attr
	Name string
	IDs  []uint64
}

// EncodeEventDesc encodes the EVENT_DESC feature (write_event_desc): u32
// nr, u32 attr_size, then per event the attr, u32 nr_ids, the name as
// EncodeString, and u64 ids[nr_ids]. perf names the file's events by index
// from it, so list them in the order of the file's attrs.
func EncodeEventDesc(events []Event) ([]byte, error) {
	b := le.AppendUint32(nil, uint32(len(events))) // nr
	b = le.AppendUint32(b, AttrSize)               // attr_size
	for i := range events {
		e := &events[i]
		var err error
		if b, err = appendAttr(b, &e.Attr); err != nil {
			return nil, fmt.Errorf("event desc %d: %w", i, err)
		}
		b = le.AppendUint32(b, uint32(len(e.IDs))) // nr_ids
		b = appendString(b, e.Name)                // name
		for _, id := range e.IDs {
			b = le.AppendUint64(b, id) // ids[nr_ids]
		}
	}
	return b, nil
}

// DecodeEventDesc decodes the EVENT_DESC feature (read_event_desc).
func DecodeEventDesc(data []byte) ([]Event, error) {
	d := &decoder{b: data}
	nr, size := int(d.u32()), int(d.u32()) // nr, attr_size
	if d.err != nil {
		return nil, fmt.Errorf("event desc: %w", d.err)
	}
	if size < AttrSizeVer0 || size > maxAttrSize {
		return nil, fmt.Errorf("event desc: attr_size %d out of range", size)
	}
	// Each event takes at least its attr, nr_ids and a string length.
	if nr > d.left()/(size+8) {
		return nil, fmt.Errorf("event desc: %d events in %d bytes", nr, len(data))
	}
	events := make([]Event, nr)
	for i := range events {
		e := &events[i]
		raw := d.bytes(size) // attr
		e.Attr = decodeAttr(raw[:min(len(raw), attrSizeVer8)])
		nids := int(d.u32()) // nr_ids
		e.Name = readString(d)
		if d.err == nil && nids > d.left()/8 {
			return nil, fmt.Errorf("event desc %d: %d ids in %d bytes", i, nids, d.left())
		}
		e.IDs = d.u64s(nil, nids) // ids[nr_ids]
		if d.err != nil {
			return nil, fmt.Errorf("event desc %d: %w", i, d.err)
		}
	}
	return events, nil
}

// BuildID is one entry of the BUILD_ID feature (struct
// perf_record_header_build_id): the build id of a file that samples hit.
type BuildID struct {
	Misc     Misc   // MiscUser for user files, MiscKernel for the kernel and modules (guest modes for guests)
	Pid      int32  // pid: the machine, -1 (HOST_KERNEL_ID) for the host
	ID       []byte // build id, at most 20 bytes
	Filename string // filename: the path perf looks up in its build-id cache
}

// buildIDEventSize is sizeof(struct perf_record_header_build_id) before filename.
const buildIDEventSize = recordHeaderSize + 4 + 24

// EncodeBuildIDs encodes the BUILD_ID feature as perf 6.1's write_buildid:
// per entry a perf_event_header (type 0, misc with MiscBuildIDSize, size),
// i32 pid, u8 build_id[20], u8 size, 3 reserved bytes, and the filename
// padded to a multiple of 64 bytes.
func EncodeBuildIDs(ids []BuildID) ([]byte, error) {
	var b []byte
	for _, e := range ids {
		if len(e.ID) > maxBuildIDSize {
			return nil, fmt.Errorf("build id of %s: %d bytes exceeds %d", e.Filename, len(e.ID), maxBuildIDSize)
		}
		if strings.IndexByte(e.Filename, 0) >= 0 {
			return nil, fmt.Errorf("build id filename %q %w", e.Filename, errNoNUL)
		}
		n := alignName(len(e.Filename) + 1)
		size := buildIDEventSize + n
		if size > maxRecordSize {
			return nil, fmt.Errorf("build id filename of %d bytes too long", len(e.Filename))
		}
		b = le.AppendUint32(b, 0)                                               // header.type
		b = le.AppendUint16(b, uint16(e.Misc&^MiscBuildIDSize|MiscBuildIDSize)) // header.misc
		b = le.AppendUint16(b, uint16(size))                                    // header.size
		b = le.AppendUint32(b, uint32(e.Pid))                                   // pid
		b = append(b, e.ID...)                                                  // data[20]
		b = append(b, make([]byte, maxBuildIDSize-len(e.ID))...)
		b = append(b, uint8(len(e.ID)), 0, 0, 0) // size, reserved1__, reserved2__
		b = append(b, e.Filename...)             // filename
		b = append(b, make([]byte, n-len(e.Filename))...)
	}
	return b, nil
}

// DecodeBuildIDs decodes the BUILD_ID feature, or the concatenated
// HEADER_BUILD_ID records of pipe mode. Entries written without
// MiscBuildIDSize (perf before 5.10) have a 20-byte ID.
func DecodeBuildIDs(data []byte) ([]BuildID, error) {
	var list []BuildID
	for off := 0; off < len(data); {
		d := &decoder{b: data[off:]}
		d.u32()               // header.type
		misc := Misc(d.u16()) // header.misc
		size := int(d.u16())  // header.size
		if d.err != nil || size < buildIDEventSize || size > len(data)-off {
			return nil, fmt.Errorf("build id at byte %d: entry of %d bytes out of range", off, size)
		}
		e := BuildID{Misc: misc &^ MiscBuildIDSize}
		e.Pid = int32(d.u32())        // pid
		id := d.bytes(maxBuildIDSize) // data[20]
		n := int(d.u8())              // size
		d.bytes(3)                    // reserved1__, reserved2__
		if misc&MiscBuildIDSize == 0 {
			n = maxBuildIDSize
		} else if n > maxBuildIDSize {
			return nil, fmt.Errorf("build id at byte %d: size %d exceeds %d", off, n, maxBuildIDSize)
		}
		e.ID = append([]byte(nil), id[:n]...)
		e.Filename = cstring(data[off+buildIDEventSize : off+size])
		list = append(list, e)
		off += size
	}
	return list, nil
}
