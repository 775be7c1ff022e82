package perfdata

import (
	"errors"
	"fmt"
	"strings"
)

// RecordType is perf_event_header.type: enum perf_event_type for records
// the kernel writes (below 64), enum perf_user_event_type for those perf
// adds (64 and up).
type RecordType uint32

// Record types.
const (
	RecordMmap            RecordType = 1  // PERF_RECORD_MMAP
	RecordLost            RecordType = 2  // PERF_RECORD_LOST
	RecordComm            RecordType = 3  // PERF_RECORD_COMM
	RecordExit            RecordType = 4  // PERF_RECORD_EXIT
	RecordThrottle        RecordType = 5  // PERF_RECORD_THROTTLE
	RecordUnthrottle      RecordType = 6  // PERF_RECORD_UNTHROTTLE
	RecordFork            RecordType = 7  // PERF_RECORD_FORK
	RecordRead            RecordType = 8  // PERF_RECORD_READ
	RecordSample          RecordType = 9  // PERF_RECORD_SAMPLE
	RecordMmap2           RecordType = 10 // PERF_RECORD_MMAP2
	RecordAux             RecordType = 11 // PERF_RECORD_AUX
	RecordItraceStart     RecordType = 12 // PERF_RECORD_ITRACE_START
	RecordLostSamples     RecordType = 13 // PERF_RECORD_LOST_SAMPLES
	RecordSwitch          RecordType = 14 // PERF_RECORD_SWITCH
	RecordSwitchCPUWide   RecordType = 15 // PERF_RECORD_SWITCH_CPU_WIDE
	RecordNamespaces      RecordType = 16 // PERF_RECORD_NAMESPACES
	RecordKsymbol         RecordType = 17 // PERF_RECORD_KSYMBOL
	RecordBPFEvent        RecordType = 18 // PERF_RECORD_BPF_EVENT
	RecordCgroup          RecordType = 19 // PERF_RECORD_CGROUP
	RecordTextPoke        RecordType = 20 // PERF_RECORD_TEXT_POKE
	RecordAuxOutputHWID   RecordType = 21 // PERF_RECORD_AUX_OUTPUT_HW_ID
	RecordUserTypeStart   RecordType = 64 // PERF_RECORD_USER_TYPE_START: perf's own records from here on
	RecordHeaderAttr      RecordType = 64 // PERF_RECORD_HEADER_ATTR (pipe mode)
	RecordHeaderEventType RecordType = 65 // PERF_RECORD_HEADER_EVENT_TYPE (obsolete)
	RecordHeaderTracing   RecordType = 66 // PERF_RECORD_HEADER_TRACING_DATA (pipe mode)
	RecordHeaderBuildID   RecordType = 67 // PERF_RECORD_HEADER_BUILD_ID (pipe mode)
	RecordFinishedRound   RecordType = 68 // PERF_RECORD_FINISHED_ROUND
	RecordIDIndex         RecordType = 69 // PERF_RECORD_ID_INDEX
	RecordAuxtraceInfo    RecordType = 70 // PERF_RECORD_AUXTRACE_INFO
	RecordAuxtrace        RecordType = 71 // PERF_RECORD_AUXTRACE (followed by its data)
	RecordAuxtraceError   RecordType = 72 // PERF_RECORD_AUXTRACE_ERROR
	RecordThreadMap       RecordType = 73 // PERF_RECORD_THREAD_MAP
	RecordCPUMap          RecordType = 74 // PERF_RECORD_CPU_MAP
	RecordStatConfig      RecordType = 75 // PERF_RECORD_STAT_CONFIG
	RecordStat            RecordType = 76 // PERF_RECORD_STAT
	RecordStatRound       RecordType = 77 // PERF_RECORD_STAT_ROUND
	RecordEventUpdate     RecordType = 78 // PERF_RECORD_EVENT_UPDATE
	RecordTimeConv        RecordType = 79 // PERF_RECORD_TIME_CONV
	RecordHeaderFeature   RecordType = 80 // PERF_RECORD_HEADER_FEATURE (pipe mode)
	RecordCompressed      RecordType = 81 // PERF_RECORD_COMPRESSED (zstd; not decoded)
	RecordFinishedInit    RecordType = 82 // PERF_RECORD_FINISHED_INIT
)

var recordNames = map[RecordType]string{
	RecordMmap: "MMAP", RecordLost: "LOST", RecordComm: "COMM", RecordExit: "EXIT",
	RecordThrottle: "THROTTLE", RecordUnthrottle: "UNTHROTTLE", RecordFork: "FORK",
	RecordRead: "READ", RecordSample: "SAMPLE", RecordMmap2: "MMAP2", RecordAux: "AUX",
	RecordItraceStart: "ITRACE_START", RecordLostSamples: "LOST_SAMPLES", RecordSwitch: "SWITCH",
	RecordSwitchCPUWide: "SWITCH_CPU_WIDE", RecordNamespaces: "NAMESPACES", RecordKsymbol: "KSYMBOL",
	RecordBPFEvent: "BPF_EVENT", RecordCgroup: "CGROUP", RecordTextPoke: "TEXT_POKE",
	RecordAuxOutputHWID: "AUX_OUTPUT_HW_ID", RecordHeaderAttr: "HEADER_ATTR",
	RecordHeaderEventType: "HEADER_EVENT_TYPE", RecordHeaderTracing: "HEADER_TRACING_DATA",
	RecordHeaderBuildID: "HEADER_BUILD_ID", RecordFinishedRound: "FINISHED_ROUND",
	RecordIDIndex: "ID_INDEX", RecordAuxtraceInfo: "AUXTRACE_INFO", RecordAuxtrace: "AUXTRACE",
	RecordAuxtraceError: "AUXTRACE_ERROR", RecordThreadMap: "THREAD_MAP", RecordCPUMap: "CPU_MAP",
	RecordStatConfig: "STAT_CONFIG", RecordStat: "STAT", RecordStatRound: "STAT_ROUND",
	RecordEventUpdate: "EVENT_UPDATE", RecordTimeConv: "TIME_CONV", RecordHeaderFeature: "HEADER_FEATURE",
	RecordCompressed: "COMPRESSED", RecordFinishedInit: "FINISHED_INIT",
}

// String returns the name perf uses without its PERF_RECORD_ prefix, e.g. "MMAP2".
func (t RecordType) String() string {
	if s, ok := recordNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// Misc is perf_event_header.misc: the CPU mode in the low 3 bits, then
// flags whose meaning depends on the record type.
type Misc uint16

// PERF_RECORD_MISC_* values.
const (
	MiscCPUModeMask      Misc = 7       // PERF_RECORD_MISC_CPUMODE_MASK
	MiscCPUModeUnknown   Misc = 0       // PERF_RECORD_MISC_CPUMODE_UNKNOWN
	MiscKernel           Misc = 1       // PERF_RECORD_MISC_KERNEL
	MiscUser             Misc = 2       // PERF_RECORD_MISC_USER
	MiscHypervisor       Misc = 3       // PERF_RECORD_MISC_HYPERVISOR
	MiscGuestKernel      Misc = 4       // PERF_RECORD_MISC_GUEST_KERNEL
	MiscGuestUser        Misc = 5       // PERF_RECORD_MISC_GUEST_USER
	MiscMmapData         Misc = 1 << 13 // PERF_RECORD_MISC_MMAP_DATA: a non-executable MMAP/MMAP2
	MiscCommExec         Misc = 1 << 13 // PERF_RECORD_MISC_COMM_EXEC: the COMM comes from exec
	MiscForkExec         Misc = 1 << 13 // PERF_RECORD_MISC_FORK_EXEC (perf internal)
	MiscSwitchOut        Misc = 1 << 13 // PERF_RECORD_MISC_SWITCH_OUT
	MiscExactIP          Misc = 1 << 14 // PERF_RECORD_MISC_EXACT_IP: SAMPLE ip is exact
	MiscMmapBuildID      Misc = 1 << 14 // PERF_RECORD_MISC_MMAP_BUILD_ID: MMAP2 carries a build id
	MiscSwitchOutPreempt Misc = 1 << 14 // PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
	MiscBuildIDSize      Misc = 1 << 15 // PERF_RECORD_MISC_BUILD_ID_SIZE: build_id_event holds its size (perf)
)

// CPUMode returns the CPU mode bits of m (MiscKernel, MiscUser, ...).
func (m Misc) CPUMode() Misc { return m & MiscCPUModeMask }

// Record is one decoded record: *Sample, *Comm, *Mmap, *Mmap2, *Fork,
// *Exit, *Lost, *FinishedRound or *Unknown.
type Record interface {
	// Type is the record's perf_event_header.type.
	Type() RecordType
	isRecord()
}

// Trailer is struct sample_id: the fields that end every kernel record
// other than SAMPLE when the event has FlagSampleIDAll, each present if its
// bit is in the event's SampleType, in the order TID, TIME, ID, STREAM_ID,
// CPU, IDENTIFIER. perf orders records by Time.
type Trailer struct {
	Pid, Tid uint32 // PERF_SAMPLE_TID: pid, tid
	Time     uint64 // PERF_SAMPLE_TIME: time
	ID       uint64 // PERF_SAMPLE_ID: id, or PERF_SAMPLE_IDENTIFIER (the same value)
	StreamID uint64 // PERF_SAMPLE_STREAM_ID: stream_id
	CPU      uint32 // PERF_SAMPLE_CPU: cpu (the reserved u32 after it is dropped)
}

// Mmap is PERF_RECORD_MMAP: a mapping, executable unless Misc has MiscMmapData.
type Mmap struct {
	Misc     Misc
	Pid, Tid uint32 // pid, tid (pid -1 for the kernel)
	Addr     uint64 // addr: start address
	Len      uint64 // len
	Pgoff    uint64 // pgoff: file offset of Addr
	Filename string // filename
	Trailer  Trailer
}

// Mmap2 is PERF_RECORD_MMAP2: a mapping with the file's identity, either
// device and inode or, when Misc has MiscMmapBuildID, its build id.
type Mmap2 struct {
	Misc          Misc
	Pid, Tid      uint32 // pid, tid
	Addr          uint64 // addr
	Len           uint64 // len
	Pgoff         uint64 // pgoff
	Maj, Min      uint32 // maj, min: device numbers (without MiscMmapBuildID)
	Ino           uint64 // ino
	InoGeneration uint64 // ino_generation
	BuildID       []byte // build_id[build_id_size], at most 20 bytes (with MiscMmapBuildID)
	Prot          uint32 // prot: PROT_READ 1 | PROT_WRITE 2 | PROT_EXEC 4
	Flags         uint32 // flags: MAP_SHARED 1, MAP_PRIVATE 2, ...
	Filename      string // filename
	Trailer       Trailer
}

// Comm is PERF_RECORD_COMM: a thread's name. perf needs one per thread,
// timed before that thread's samples, else it prints ":TID".
type Comm struct {
	Misc     Misc   // MiscCommExec if the name changed by exec
	Pid, Tid uint32 // pid, tid
	Comm     string // comm: at most 15 bytes from the kernel
	Trailer  Trailer
}

// Exec reports whether the name changed by exec (MiscCommExec).
func (c *Comm) Exec() bool { return c.Misc&MiscCommExec != 0 }

// Fork is PERF_RECORD_FORK (struct perf_event_task): a new thread or process.
type Fork struct {
	Misc      Misc
	Pid, PPid uint32 // pid, ppid
	Tid, PTid uint32 // tid, ptid
	Time      uint64 // time
	Trailer   Trailer
}

// Exit is PERF_RECORD_EXIT, the same struct perf_event_task as Fork: a
// thread exited.
type Exit Fork

// Lost is PERF_RECORD_LOST: the kernel dropped Lost records of the event
// with ID because the ring buffer was full.
type Lost struct {
	Misc    Misc
	ID      uint64 // id
	Lost    uint64 // lost
	Trailer Trailer
}

// FinishedRound is PERF_RECORD_FINISHED_ROUND: perf may sort and process
// every record read so far whose time is at most the largest time seen
// before the previous round. Writing one every few megabytes bounds perf's
// reordering memory; none are needed.
type FinishedRound struct{}

// Unknown is any other record, kept whole: Raw is the perf_event_header
// and body exactly as in the file, so it can be written back verbatim.
// AUXTRACE payloads and pipe-mode tracing data that follow a record outside
// its size are not part of Raw.
type Unknown struct {
	Raw []byte
}

// Type returns RecordSample.
func (*Sample) Type() RecordType { return RecordSample }

// Type returns RecordComm.
func (*Comm) Type() RecordType { return RecordComm }

// Type returns RecordMmap.
func (*Mmap) Type() RecordType { return RecordMmap }

// Type returns RecordMmap2.
func (*Mmap2) Type() RecordType { return RecordMmap2 }

// Type returns RecordFork.
func (*Fork) Type() RecordType { return RecordFork }

// Type returns RecordExit.
func (*Exit) Type() RecordType { return RecordExit }

// Type returns RecordLost.
func (*Lost) Type() RecordType { return RecordLost }

// Type returns RecordFinishedRound.
func (*FinishedRound) Type() RecordType { return RecordFinishedRound }

// Type returns the type in Raw's header.
func (u *Unknown) Type() RecordType {
	if len(u.Raw) < 4 {
		return 0
	}
	return RecordType(le.Uint32(u.Raw))
}

// Misc returns the misc field of Raw's header.
func (u *Unknown) Misc() Misc {
	if len(u.Raw) < 6 {
		return 0
	}
	return Misc(le.Uint16(u.Raw[4:]))
}

func (*Sample) isRecord()        {}
func (*Comm) isRecord()          {}
func (*Mmap) isRecord()          {}
func (*Mmap2) isRecord()         {}
func (*Fork) isRecord()          {}
func (*Exit) isRecord()          {}
func (*Lost) isRecord()          {}
func (*FinishedRound) isRecord() {}
func (*Unknown) isRecord()       {}

// Record header layout (struct perf_event_header).
const (
	recordHeaderSize = 8
	maxRecordSize    = 1<<16 - 1 // perf_event_header.size is a u16
	maxBuildIDSize   = 20        // BUILD_ID_SIZE
)

// decodeTrailer decodes a sample_id trailer of the layout st.
func decodeTrailer(b []byte, st SampleType) (Trailer, error) {
	var t Trailer
	d := &decoder{b: b}
	if st&SampleTID != 0 {
		t.Pid, t.Tid = d.u32(), d.u32() // pid, tid
	}
	if st&SampleTime != 0 {
		t.Time = d.u64() // time
	}
	if st&SampleID != 0 {
		t.ID = d.u64() // id
	}
	if st&SampleStreamID != 0 {
		t.StreamID = d.u64() // stream_id
	}
	if st&SampleCPU != 0 {
		t.CPU = d.u32() // cpu
		d.u32()         // res
	}
	if st&SampleIdentifier != 0 {
		t.ID = d.u64() // id
	}
	return t, d.err
}

func appendTrailer(dst []byte, a *Attr, t *Trailer) []byte {
	if a.Flags&FlagSampleIDAll == 0 {
		return dst
	}
	st := a.SampleType
	if st&SampleTID != 0 {
		dst = le.AppendUint32(dst, t.Pid)
		dst = le.AppendUint32(dst, t.Tid)
	}
	if st&SampleTime != 0 {
		dst = le.AppendUint64(dst, t.Time)
	}
	if st&SampleID != 0 {
		dst = le.AppendUint64(dst, t.ID)
	}
	if st&SampleStreamID != 0 {
		dst = le.AppendUint64(dst, t.StreamID)
	}
	if st&SampleCPU != 0 {
		dst = le.AppendUint32(dst, t.CPU)
		dst = le.AppendUint32(dst, 0)
	}
	if st&SampleIdentifier != 0 {
		dst = le.AppendUint64(dst, t.ID)
	}
	return dst
}

// decodeRecord decodes one whole record raw (header included). a gives the
// trailer layout of kernel records and the field layout of samples; ev is
// the index of the event a belongs to (-1 if none matched).
func decodeRecord(raw []byte, a *Attr, ev int) (Record, error) {
	return decodeRecordInto(raw, a, ev, nil)
}

// decodeRecordInto is decodeRecord into buf's records; nil buf: new ones.
func decodeRecordInto(raw []byte, a *Attr, ev int, buf *RecordBuffer) (Record, error) {
	typ := RecordType(le.Uint32(raw))
	misc := Misc(le.Uint16(raw[4:]))
	body := raw[recordHeaderSize:]
	switch typ {
	case RecordSample:
		var s *Sample
		if buf != nil {
			s = buf.sample.reset()
		} else {
			s = new(Sample)
		}
		if err := decodeSample(s, body, misc, a, ev); err != nil {
			return nil, err
		}
		return s, nil
	case RecordFinishedRound:
		return &FinishedRound{}, nil
	case RecordMmap, RecordMmap2, RecordComm, RecordFork, RecordExit, RecordLost:
	default:
		u := into(buf, func(b *RecordBuffer) *Unknown { return &b.unknown })
		u.Raw = raw
		return u, nil
	}
	// Kernel records with a fixed part, maybe a string, then the trailer.
	var trailer Trailer
	if n := a.trailerSize(); n > 0 {
		if n > len(body) {
			return nil, fmt.Errorf("%v record of %d bytes has no room for its %d-byte sample_id", typ, len(raw), n)
		}
		var err error
		if trailer, err = decodeTrailer(body[len(body)-n:], a.SampleType); err != nil {
			return nil, fmt.Errorf("%v sample_id: %w", typ, err)
		}
		body = body[:len(body)-n]
	}
	d := &decoder{b: body}
	var rec Record
	switch typ {
	case RecordMmap:
		m := into(buf, func(b *RecordBuffer) *Mmap { return &b.mmap })
		m.Misc, m.Trailer = misc, trailer
		m.Pid, m.Tid = d.u32(), d.u32() // pid, tid
		m.Addr = d.u64()                // addr
		m.Len = d.u64()                 // len
		m.Pgoff = d.u64()               // pgoff
		m.Filename = cstring(d.bytes(d.left()))
		rec = m
	case RecordMmap2:
		m := into(buf, func(b *RecordBuffer) *Mmap2 { return &b.mmap2 })
		m.Misc, m.Trailer = misc, trailer
		m.Pid, m.Tid = d.u32(), d.u32() // pid, tid
		m.Addr = d.u64()                // addr
		m.Len = d.u64()                 // len
		m.Pgoff = d.u64()               // pgoff
		if misc&MiscMmapBuildID != 0 {
			n := int(d.u8()) // build_id_size
			d.u8()           // __reserved_1
			d.u16()          // __reserved_2
			id := d.bytes(maxBuildIDSize)
			if n > maxBuildIDSize {
				return nil, fmt.Errorf("MMAP2 build_id_size %d exceeds %d", n, maxBuildIDSize)
			}
			if id != nil {
				m.BuildID = append([]byte(nil), id[:n]...)
			}
		} else {
			m.Maj, m.Min = d.u32(), d.u32() // maj, min
			m.Ino = d.u64()                 // ino
			m.InoGeneration = d.u64()       // ino_generation
		}
		m.Prot = d.u32()  // prot
		m.Flags = d.u32() // flags
		m.Filename = cstring(d.bytes(d.left()))
		rec = m
	case RecordComm:
		c := into(buf, func(b *RecordBuffer) *Comm { return &b.comm })
		c.Misc, c.Trailer = misc, trailer
		c.Pid, c.Tid = d.u32(), d.u32() // pid, tid
		c.Comm = cstring(d.bytes(d.left()))
		rec = c
	case RecordFork, RecordExit:
		var t Fork
		t.Misc, t.Trailer = misc, trailer
		t.Pid, t.PPid = d.u32(), d.u32() // pid, ppid
		t.Tid, t.PTid = d.u32(), d.u32() // tid, ptid
		t.Time = d.u64()                 // time
		if typ == RecordExit {
			e := into(buf, func(b *RecordBuffer) *Exit { return &b.exit })
			*e = Exit(t)
			rec = e
		} else {
			f := into(buf, func(b *RecordBuffer) *Fork { return &b.fork })
			*f = t
			rec = f
		}
	case RecordLost:
		l := into(buf, func(b *RecordBuffer) *Lost { return &b.lost })
		l.Misc, l.Trailer = misc, trailer
		l.ID = d.u64()   // id
		l.Lost = d.u64() // lost
		rec = l
	}
	if d.err != nil {
		return nil, fmt.Errorf("%v: %w", typ, d.err)
	}
	return rec, nil
}

var errNoNUL = errors.New("contains a NUL byte")

// appendRecord encodes rec as the kernel lays it out for an event with
// attr a: header, body, and the sample_id trailer when a has FlagSampleIDAll.
func appendRecord(dst []byte, a *Attr, rec Record) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderSize)...)
	var misc Misc
	var err error
	switch r := rec.(type) {
	case *Sample:
		misc = r.Misc
		dst, err = appendSample(dst, a, r)
	case *Mmap:
		misc = r.Misc
		if strings.IndexByte(r.Filename, 0) >= 0 {
			return dst[:start], fmt.Errorf("MMAP filename %q %w", r.Filename, errNoNUL)
		}
		dst = le.AppendUint32(dst, r.Pid)
		dst = le.AppendUint32(dst, r.Tid)
		dst = le.AppendUint64(dst, r.Addr)
		dst = le.AppendUint64(dst, r.Len)
		dst = le.AppendUint64(dst, r.Pgoff)
		dst = appendCString(dst, r.Filename)
		dst = appendTrailer(dst, a, &r.Trailer)
	case *Mmap2:
		misc = r.Misc
		if strings.IndexByte(r.Filename, 0) >= 0 {
			return dst[:start], fmt.Errorf("MMAP2 filename %q %w", r.Filename, errNoNUL)
		}
		if len(r.BuildID) > maxBuildIDSize {
			return dst[:start], fmt.Errorf("MMAP2 build id of %d bytes exceeds %d", len(r.BuildID), maxBuildIDSize)
		}
		dst = le.AppendUint32(dst, r.Pid)
		dst = le.AppendUint32(dst, r.Tid)
		dst = le.AppendUint64(dst, r.Addr)
		dst = le.AppendUint64(dst, r.Len)
		dst = le.AppendUint64(dst, r.Pgoff)
		if r.BuildID != nil || misc&MiscMmapBuildID != 0 {
			misc |= MiscMmapBuildID
			dst = append(dst, uint8(len(r.BuildID)), 0, 0, 0) // build_id_size, __reserved_1, __reserved_2
			dst = append(dst, r.BuildID...)
			dst = append(dst, make([]byte, maxBuildIDSize-len(r.BuildID))...)
		} else {
			dst = le.AppendUint32(dst, r.Maj)
			dst = le.AppendUint32(dst, r.Min)
			dst = le.AppendUint64(dst, r.Ino)
			dst = le.AppendUint64(dst, r.InoGeneration)
		}
		dst = le.AppendUint32(dst, r.Prot)
		dst = le.AppendUint32(dst, r.Flags)
		dst = appendCString(dst, r.Filename)
		dst = appendTrailer(dst, a, &r.Trailer)
	case *Comm:
		misc = r.Misc
		if strings.IndexByte(r.Comm, 0) >= 0 {
			return dst[:start], fmt.Errorf("COMM %q %w", r.Comm, errNoNUL)
		}
		dst = le.AppendUint32(dst, r.Pid)
		dst = le.AppendUint32(dst, r.Tid)
		dst = appendCString(dst, r.Comm)
		dst = appendTrailer(dst, a, &r.Trailer)
	case *Fork:
		misc = r.Misc
		dst = appendTask(dst, r.Pid, r.PPid, r.Tid, r.PTid, r.Time)
		dst = appendTrailer(dst, a, &r.Trailer)
	case *Exit:
		misc = r.Misc
		dst = appendTask(dst, r.Pid, r.PPid, r.Tid, r.PTid, r.Time)
		dst = appendTrailer(dst, a, &r.Trailer)
	case *Lost:
		misc = r.Misc
		dst = le.AppendUint64(dst, r.ID)
		dst = le.AppendUint64(dst, r.Lost)
		dst = appendTrailer(dst, a, &r.Trailer)
	case *FinishedRound:
	case *Unknown:
		if err := checkRawRecord(r.Raw); err != nil {
			return dst[:start], err
		}
		return append(dst[:start], r.Raw...), nil
	default:
		return dst[:start], fmt.Errorf("cannot encode %T", rec)
	}
	if err != nil {
		return dst[:start], err
	}
	size := len(dst) - start
	if size > maxRecordSize {
		return dst[:start], fmt.Errorf("%v record of %d bytes exceeds the %d-byte limit", rec.Type(), size, maxRecordSize)
	}
	le.PutUint32(dst[start:], uint32(rec.Type())) // type
	le.PutUint16(dst[start+4:], uint16(misc))     // misc
	le.PutUint16(dst[start+6:], uint16(size))     // size
	return dst, nil
}

func appendTask(dst []byte, pid, ppid, tid, ptid uint32, time uint64) []byte {
	dst = le.AppendUint32(dst, pid)
	dst = le.AppendUint32(dst, ppid)
	dst = le.AppendUint32(dst, tid)
	dst = le.AppendUint32(dst, ptid)
	return le.AppendUint64(dst, time)
}

// checkRawRecord checks that raw is one whole record whose header size
// matches its length.
func checkRawRecord(raw []byte) error {
	if len(raw) < recordHeaderSize {
		return fmt.Errorf("record of %d bytes is shorter than its header", len(raw))
	}
	if size := int(le.Uint16(raw[6:])); size != len(raw) {
		return fmt.Errorf("%v record: header size %d, but %d bytes given", RecordType(le.Uint32(raw)), size, len(raw))
	}
	return nil
}

// DecodeRecord decodes one whole record raw (header included), as a file
// of the single event a would hold it: for reading records as they are
// made, without a file. Malformed input is an error, never a panic.
func DecodeRecord(raw []byte, a *Attr) (Record, error) {
	return DecodeRecordInto(raw, a, nil)
}

// RecordBuffer is what DecodeRecordInto decodes into: one record of each
// kind, and the storage of the last sample's lists, reused by every call.
// Its zero value is ready to use.
type RecordBuffer struct {
	sample  Sample
	mmap    Mmap
	mmap2   Mmap2
	comm    Comm
	fork    Fork
	exit    Exit
	lost    Lost
	unknown Unknown
}

// DecodeRecordInto is DecodeRecord decoding into buf (nil: new records), as
// cilium's perf.Reader.ReadInto reads: the record it returns is one of
// buf's, valid until the next call with buf, and a sample's lists reuse the
// last one's storage, so decoding a stream of records allocates only for
// strings (names in COMM and MMAP records). Slices alias raw, as
// DecodeRecord's do.
func DecodeRecordInto(raw []byte, a *Attr, buf *RecordBuffer) (Record, error) {
	if err := checkRawRecord(raw); err != nil {
		return nil, err
	}
	if RecordType(le.Uint32(raw)) >= RecordUserTypeStart {
		return decodeRecordInto(raw, &Attr{}, -1, buf)
	}
	return decodeRecordInto(raw, a, 0, buf)
}

// into is buf's record of one kind (field picks it), cleared, or a new one
// when buf is nil.
func into[T any](buf *RecordBuffer, field func(*RecordBuffer) *T) *T {
	if buf == nil {
		return new(T)
	}
	r := field(buf)
	var zero T
	*r = zero
	return r
}
