package recording

import (
	"github.com/rubyperf/rubyperf/bpf"
	"github.com/rubyperf/rubyperf/perfdata"
)

// outputAttr is the bpf-output event's attribute as perf.data records it,
// and as every record the rings bring is decoded: the one the sampler
// opens the event with, given o (bpf.FormatOf), field for field.
func outputAttr(o bpf.Options) perfdata.Attr {
	f := bpf.FormatOf(o)
	return perfdata.Attr{Type: f.Type, Config: f.Config, SamplePeriodOrFreq: f.SamplePeriod,
		SampleType: perfdata.SampleType(f.SampleType), Flags: perfdata.AttrFlags(f.Bits),
		SampleRegsUser: f.SampleRegsUser, SampleStackUser: f.SampleStackUser}
}
