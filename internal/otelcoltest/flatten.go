package otelcoltest

import (
	"fmt"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Profile is one OTLP profile with every reference into its dictionary
// resolved: what a test asserts on.
type Profile struct {
	ID         string         // the profile id, hex
	Resource   map[string]any // the resource's attributes
	Scope      string
	SampleType string // "type/unit"
	PeriodType string
	Period     int64
	Start      int64 // ns since the epoch
	Duration   uint64
	Samples    []Sample
}

// Sample is one sample of a Profile.
type Sample struct {
	Frames []Frame // leaf first
	Values []int64
	Attrs  map[string]string
}

// Frame is one location of a sample's stack.
type Frame struct {
	Function, File string
	Line           int64
	Address        uint64
	Mapping        string // the mapping's file name, "" for none
	BuildID        string // the mapping's process.executable.build_id.gnu
	Type           string // profile.frame.type
}

// Flatten resolves every profile of pd. A reference out of its table is an
// error: a sender that writes one sends profiles no backend can read.
func Flatten(pd pprofile.Profiles) ([]Profile, error) {
	d := pd.Dictionary()
	strs := d.StringTable()
	str := func(i int32) (string, error) {
		if i < 0 || int(i) >= strs.Len() {
			return "", fmt.Errorf("string index %d out of %d", i, strs.Len())
		}
		return strs.At(int(i)), nil
	}
	attrs := func(idx []int32) (map[string]string, error) {
		out := map[string]string{}
		for _, i := range idx {
			if i < 0 || int(i) >= d.AttributeTable().Len() {
				return nil, fmt.Errorf("attribute index %d out of %d", i, d.AttributeTable().Len())
			}
			a := d.AttributeTable().At(int(i))
			k, err := str(a.KeyStrindex())
			if err != nil {
				return nil, err
			}
			out[k] = a.Value().AsString()
		}
		return out, nil
	}
	var out []Profile
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		res := rp.Resource().Attributes().AsRaw()
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				p := sp.Profiles().At(k)
				st, err := valueType(str, p.SampleType())
				if err != nil {
					return nil, err
				}
				pt, err := valueType(str, p.PeriodType())
				if err != nil {
					return nil, err
				}
				prof := Profile{ID: p.ProfileID().String(), Resource: res, Scope: sp.Scope().Name(), SampleType: st, PeriodType: pt, Period: p.Period(),
					Start: int64(p.Time()), Duration: p.DurationNano()}
				for s := 0; s < p.Samples().Len(); s++ {
					smp := p.Samples().At(s)
					si := smp.StackIndex()
					if si < 0 || int(si) >= d.StackTable().Len() {
						return nil, fmt.Errorf("stack index %d out of %d", si, d.StackTable().Len())
					}
					var fs []Frame
					locs := d.StackTable().At(int(si)).LocationIndices()
					for l := 0; l < locs.Len(); l++ {
						f, err := frame(d, str, attrs, locs.At(l))
						if err != nil {
							return nil, err
						}
						fs = append(fs, f...)
					}
					a, err := attrs(smp.AttributeIndices().AsRaw())
					if err != nil {
						return nil, err
					}
					prof.Samples = append(prof.Samples, Sample{Frames: fs, Values: smp.Values().AsRaw(), Attrs: a})
				}
				out = append(out, prof)
			}
		}
	}
	return out, nil
}

func valueType(str func(int32) (string, error), v pprofile.ValueType) (string, error) {
	t, err := str(v.TypeStrindex())
	if err != nil {
		return "", err
	}
	u, err := str(v.UnitStrindex())
	return t + "/" + u, err
}

// frame resolves location li: a frame per line (inlined functions), leaf first.
func frame(d pprofile.ProfilesDictionary, str func(int32) (string, error), attrs func([]int32) (map[string]string, error), li int32) ([]Frame, error) {
	if li < 0 || int(li) >= d.LocationTable().Len() {
		return nil, fmt.Errorf("location index %d out of %d", li, d.LocationTable().Len())
	}
	loc := d.LocationTable().At(int(li))
	base := Frame{Address: loc.Address()}
	a, err := attrs(loc.AttributeIndices().AsRaw())
	if err != nil {
		return nil, err
	}
	base.Type = a["profile.frame.type"]
	if mi := loc.MappingIndex(); mi != 0 {
		if mi < 0 || int(mi) >= d.MappingTable().Len() {
			return nil, fmt.Errorf("mapping index %d out of %d", mi, d.MappingTable().Len())
		}
		m := d.MappingTable().At(int(mi))
		if base.Mapping, err = str(m.FilenameStrindex()); err != nil {
			return nil, err
		}
		ma, err := attrs(m.AttributeIndices().AsRaw())
		if err != nil {
			return nil, err
		}
		base.BuildID = ma["process.executable.build_id.gnu"]
	}
	var out []Frame
	for i := 0; i < loc.Lines().Len(); i++ {
		ln := loc.Lines().At(i)
		fi := ln.FunctionIndex()
		if fi < 0 || int(fi) >= d.FunctionTable().Len() {
			return nil, fmt.Errorf("function index %d out of %d", fi, d.FunctionTable().Len())
		}
		fn := d.FunctionTable().At(int(fi))
		f := base
		if f.Function, err = str(fn.NameStrindex()); err != nil {
			return nil, err
		}
		if f.File, err = str(fn.FilenameStrindex()); err != nil {
			return nil, err
		}
		f.Line = ln.Line()
		out = append(out, f)
	}
	if len(out) == 0 {
		out = append(out, base)
	}
	return out, nil
}
