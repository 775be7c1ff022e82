package bpf

import (
	"encoding/binary"
	"fmt"

	"github.com/rubyperf/rubyperf/perfdata"
)

// sampleOf decodes a sample record Run delivered, as a reader of the
// Sampler's output does: with perfdata, by the event's OutputFormat.
func sampleOf(s *Sampler, rec Record) (*perfdata.Sample, error) {
	f := s.OutputFormat()
	a := perfdata.Attr{Type: f.Type, Config: f.Config, SampleType: perfdata.SampleType(f.SampleType),
		Flags: perfdata.AttrFlags(f.Bits), SampleRegsUser: f.SampleRegsUser, SampleStackUser: f.SampleStackUser}
	raw := binary.LittleEndian.AppendUint32(nil, uint32(rec.Header.Type))
	raw = binary.LittleEndian.AppendUint16(raw, uint16(rec.Header.Misc))
	raw = binary.LittleEndian.AppendUint16(raw, uint16(8+len(rec.Data)))
	r, err := perfdata.DecodeRecord(append(raw, rec.Data...), &a)
	if err != nil {
		return nil, err
	}
	smp, ok := r.(*perfdata.Sample)
	if !ok {
		return nil, fmt.Errorf("a %v record, not a sample", r.Type())
	}
	return smp, nil
}
