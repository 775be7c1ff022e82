package recording

import (
	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/readback"
	"github.com/rubyperf/rubyperf/rubystack"
	"github.com/rubyperf/rubyperf/symtab"
)

// Request labels (ruby-profiler's per-fiber state): the program copies each
// pair as it was at the sample; the recorder names them while the process
// lives (a key's ID through the VM's symbol table, a value from the copied
// bytes, or its class) and writes the names' ids into the sample
// (payload.NameLabels), so a recording reads without the process.

// labelKeyCacheMax bounds the key names a target keeps: keys are few.
const labelKeyCacheMax = 1 << 12

// nameLabels names the labels of sample p (its RAW payload raw), read
// through t's Reader.
func (s *session) nameLabels(t *Target, p *payload.Payload, raw []byte) {
	if len(p.Labels) == 0 {
		return
	}
	names := s.labelIDs[:0]
	for _, l := range p.Labels {
		key, ok := t.labelKeys[l.Key]
		if !ok {
			name, err := t.Reader.IDName(l.Key)
			if err != nil || name == "" {
				name = readback.UnknownLabelValue
			}
			if t.labelKeys == nil || len(t.labelKeys) >= labelKeyCacheMax {
				t.labelKeys = map[uint64]uint64{}
			}
			key = s.symtab.NameID(symtab.FrameInfo{Label: name})
			t.labelKeys[l.Key] = key
		}
		text, err := t.Reader.DescribeValue(rubystack.ValueCopy{Value: l.Value, Obj: l.Obj[:], Ext: l.Ext[:]})
		if err != nil {
			text = readback.UnknownLabelValue
		}
		names = append(names, [2]uint64{key, s.symtab.NameID(symtab.FrameInfo{Label: text})})
	}
	s.labelIDs = names
	payload.NameLabels(raw, p, names) // a payload it cannot read stays as it was: unnamed
}
