package perfdata

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
)

// record assembles a record: header, then the body, size as given (the
// user records of pipe mode need not be 8-byte aligned).
func record(typ RecordType, misc Misc, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	h := le.AppendUint32(nil, uint32(typ))
	h = le.AppendUint16(h, uint16(misc))
	h = le.AppendUint16(h, uint16(8+len(b)))
	return append(h, b...)
}

func u64s(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = le.AppendUint64(b, x)
	}
	return b
}

// TestPipeFolding builds a pipe-mode stream by hand: the header records
// are folded into Events and Feature, the payloads that follow
// TRACING_DATA and AUXTRACE records are skipped, and a stream cut inside
// a record is an error naming its offset.
func TestPipeFolding(t *testing.T) {
	a := Attr{Type: TypeSoftware, Size: AttrSize, Config: CountSWCPUClock, SampleType: SampleIdentifier | SampleTID | SampleTime, Flags: FlagSampleIDAll}
	attr, err := appendAttr(nil, &a)
	if err != nil {
		t.Fatal(err)
	}
	b := a
	b.Config = CountSWTaskClock
	attrB, _ := appendAttr(nil, &b)
	ids, _ := EncodeBuildIDs([]BuildID{{Misc: MiscUser, Pid: -1, ID: []byte{0xbe, 0xef}, Filename: "/bin/x"}})
	sample := func(id uint64) []byte {
		return record(RecordSample, MiscUser, u64s(id), le.AppendUint32(le.AppendUint32(nil, 1), 2), u64s(99))
	}
	stream := bytes.Join([][]byte{
		u64s(magic2, pipeHeaderSize),
		record(RecordHeaderAttr, 0, attr, u64s(31, 32)),
		record(RecordHeaderAttr, 0, attrB, u64s(41)),
		record(RecordHeaderFeature, 0, u64s(uint64(FeatHostname)), EncodeString("pipehost")),
		record(RecordHeaderFeature, 0, u64s(999), []byte("ignored: no such bit")),
		record(RecordEventUpdate, 0, u64s(eventUpdateName, 41), []byte("task-clock:u\x00\x00\x00\x00")),
		record(RecordHeaderTracing, 0, le.AppendUint32(nil, 5), make([]byte, 4)), []byte("trace\x00\x00\x00"),
		ids, // a HEADER_BUILD_ID record has the layout of a BUILD_ID entry, but type 67
		sample(31),
		record(RecordAuxtrace, 0, u64s(16, 0, 0), make([]byte, 16)), []byte("aux data 16 byte"),
		sample(41),
		record(RecordFinishedRound, 0),
	}, nil)
	le.PutUint32(stream[bytes.Index(stream, ids):], uint32(RecordHeaderBuildID))

	r, err := NewPipeReader(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if evs := r.Events(); len(evs) != 2 || evs[0].Attr != a || evs[1].Attr != b || evs[1].Name != "task-clock:u" || !reflect.DeepEqual(evs[0].IDs, []uint64{31, 32}) {
		t.Errorf("events %+v", evs)
	}
	if got := r.Features(); !reflect.DeepEqual(got, []Feature{FeatTracingData, FeatBuildID, FeatHostname}) {
		t.Errorf("features %v", got)
	}
	if h, _ := r.Feature(FeatHostname); string(h[4:12]) != "pipehost" {
		t.Errorf("hostname %q", h)
	}
	if td, _ := r.Feature(FeatTracingData); string(td) != "trace" {
		t.Errorf("tracing data %q", td)
	}
	bid, _ := r.Feature(FeatBuildID)
	if list, err := DecodeBuildIDs(bid); err != nil || len(list) != 1 || list[0].Filename != "/bin/x" || !bytes.Equal(list[0].ID, []byte{0xbe, 0xef}) {
		t.Errorf("build ids %+v %v", list, err)
	}
	var kinds []string
	for r.Next() {
		kind := r.Record().Type().String()
		if s, ok := r.Record().(*Sample); ok {
			kind += "/" + r.Events()[s.Event].Name
		}
		kinds = append(kinds, kind)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"SAMPLE/", "AUXTRACE", "SAMPLE/task-clock:u", "FINISHED_ROUND"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("records %v, want %v", kinds, want)
	}

	// Cut inside the last sample: an error naming its offset.
	cut := stream[:len(stream)-12]
	r, err = NewPipeReader(io.MultiReader(bytes.NewReader(cut)))
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "pipe: record at offset 0x") || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("cut stream: %v", err)
	}
}
