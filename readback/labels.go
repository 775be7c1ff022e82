package readback

import (
	"github.com/rubyperf/rubyperf/merge"
	"github.com/rubyperf/rubyperf/payload"
)

// UnknownLabelValue is the value of a label that could not be read.
const UnknownLabelValue = "[unknown]"

// labelsOf reads a sample's labels as the recorder named them.
func (rd *Reader) labelsOf(p *payload.Payload, out []merge.Label) []merge.Label {
	out = out[:0]
	if p.Flags&payload.LabelsNamed == 0 {
		return out // never named (a recorder killed before): addresses mean nothing now
	}
	for _, l := range p.Labels {
		k, _, kok := rd.symtab.FrameName(l.Key)
		v, _, vok := rd.symtab.FrameName(l.Value)
		if !kok {
			continue
		}
		if !vok {
			v.Label = UnknownLabelValue
		}
		out = append(out, merge.Label{Key: k.Label, Value: v.Label})
	}
	return out
}
