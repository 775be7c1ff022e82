package agent

import (
	"crypto/rand"
	"path"
	"slices"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rubyperf/rubyperf/export"
	"github.com/rubyperf/rubyperf/merge"
)

// Resource is what every profile the agent sends says of where it comes
// from, besides its process.
type Resource struct {
	Host string
	// Labels are the user's (--label): resource attributes of every profile.
	Labels map[string]string
	// ServiceName, when set, is every profile's service.name; else the
	// process's name.
	ServiceName string
	Period      int64 // ns of CPU time a sample stands for
	Version     string
}

// Attribute keys, from OpenTelemetry's semantic conventions where they
// have one.
const (
	attrFrameType   = "profile.frame.type"
	attrBuildID     = "process.executable.build_id.gnu"
	attrThreadName  = "thread.name"
	attrThreadState = "ruby.thread.state" // merge.State
	attrLabelPrefix = "ruby.label."       // a request label of the sample (ruby-profiler)
	attrObjectClass = "ruby.object.class" // an allocation sample's object's class (merge.ClassLabel)
	frameTypeRuby   = "ruby"
	frameTypeNative = "native"
	frameTypeKernel = "kernel"
	scopeName       = "rubyperf"
	sampleTypeType  = "samples"
	sampleTypeUnit  = "count"
	periodTypeType  = "cpu"
	periodTypeUnit  = "nanoseconds"
	// An allocation profile's, as Go's heap profiles name them.
	allocObjectsType = "alloc_objects"
	allocObjectsUnit = "count"
	allocSpaceType   = "alloc_space"
	allocSpaceUnit   = "bytes"
	allocPeriodType  = "space"
	allocPeriodUnit  = "bytes"
	inUseObjectsType = "inuse_objects"
	inUseSpaceType   = "inuse_space"
	serviceNameAttr  = "service.name"
	runtimeName      = "ruby"
	processPIDAttr   = "process.pid"
	containerIDAttr  = "container.id"
	hostNameAttr     = "host.name"
	executableName   = "process.executable.name"
	executablePath   = "process.executable.path"
	runtimeNameAttr  = "process.runtime.name"
	runtimeVersion   = "process.runtime.version"
	processNameAttr  = "process.command"
)

// dictionary builds the tables a request's profiles share, each entry once.
// Functions, locations and mappings are export.FrameTable's, the same as
// pprof's; they are written into the dictionary at the end (finish), with
// what only OTLP has: each location's frame type, each mapping's build-id
// as an attribute.
type dictionary struct {
	d         pprofile.ProfilesDictionary
	frames    *export.FrameTable
	strings   map[string]int32
	locations map[int32]int32 // by frame id of the interval
	stacks    map[string]int32
	attrs     map[[2]string]int32
}

func newDictionary(d pprofile.ProfilesDictionary) *dictionary {
	t := &dictionary{d: d, frames: export.NewFrameTable(), strings: map[string]int32{},
		locations: map[int32]int32{}, stacks: map[string]int32{}, attrs: map[[2]string]int32{}}
	// Index 0 of every table is its zero value, which references to
	// "nothing" point to.
	t.str("")
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	return t
}

// str is the index of s in the string table. Protobuf strings are UTF-8:
// bytes that are not (a Ruby name may hold any) become U+FFFD.
func (t *dictionary) str(s string) int32 {
	if i, ok := t.strings[s]; ok {
		return i
	}
	i := int32(t.d.StringTable().Len())
	t.d.StringTable().Append(strings.ToValidUTF8(s, "\uFFFD"))
	t.strings[s] = i
	return i
}

func (t *dictionary) attr(key, value string) int32 {
	k := [2]string{key, value}
	if i, ok := t.attrs[k]; ok {
		return i
	}
	i := int32(t.d.AttributeTable().Len())
	a := t.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(t.str(key))
	a.Value().SetStr(value)
	t.attrs[k] = i
	return i
}

// location is the index in the location table of frame id of iv: the
// frame table's location, after the table's zero entry.
func (t *dictionary) location(iv *Interval, id int32) int32 {
	if i, ok := t.locations[id]; ok {
		return i
	}
	f := &iv.Frames[id]
	m := f.merged()
	i := int32(t.frames.Location(&m)) + 1
	t.locations[id] = i
	return i
}

// finish writes the frame table's functions, mappings and locations into
// the dictionary, each table after its zero entry.
func (t *dictionary) finish() {
	ft := t.frames
	for _, fn := range ft.Functions {
		out := t.d.FunctionTable().AppendEmpty()
		out.SetNameStrindex(t.str(fn.Name))
		out.SetSystemNameStrindex(t.str(fn.SystemName))
		out.SetFilenameStrindex(t.str(fn.File))
	}
	ids := ft.MappingIDs()
	for range ids {
		t.d.MappingTable().AppendEmpty()
	}
	for i, m := range ft.Mappings {
		out := t.d.MappingTable().At(ids[i])
		out.SetMemoryStart(m.Start)
		out.SetMemoryLimit(m.Limit)
		out.SetFileOffset(m.Offset)
		out.SetFilenameStrindex(t.str(m.File))
		if m.BuildID != "" {
			out.AttributeIndices().Append(t.attr(attrBuildID, m.BuildID))
		}
	}
	for _, l := range ft.Locations {
		out := t.d.LocationTable().AppendEmpty()
		if l.Mapping >= 0 {
			out.SetMappingIndex(int32(ids[l.Mapping]))
		}
		out.SetAddress(l.Address)
		line := out.Lines().AppendEmpty()
		line.SetFunctionIndex(int32(l.Function) + 1)
		line.SetLine(l.Line)
		if typ := frameType(l.Type); typ != "" {
			out.AttributeIndices().Append(t.attr(attrFrameType, typ))
		}
	}
}

// frameType is the profile.frame.type of a location of type typ; "" for a
// pseudo-frame, which is no code.
func frameType(typ export.FrameType) string {
	switch typ {
	case export.FrameRuby:
		return frameTypeRuby
	case export.FrameNative:
		return frameTypeNative
	case export.FrameKernel:
		return frameTypeKernel
	}
	return ""
}

// stack is the stack of locations of a sample's frames, leaf first.
func (t *dictionary) stack(iv *Interval, frames []int32, key []byte) (int32, []byte) {
	key = key[:0]
	locs := make([]int32, len(frames))
	for i, id := range frames {
		locs[i] = t.location(iv, id)
		key = append(key, byte(locs[i]), byte(locs[i]>>8), byte(locs[i]>>16), byte(locs[i]>>24))
	}
	if i, ok := t.stacks[string(key)]; ok {
		return i, key
	}
	i := int32(t.d.StackTable().Len())
	t.d.StackTable().AppendEmpty().LocationIndices().Append(locs...)
	t.stacks[string(key)] = i
	return i, key
}

// pids are the interval's processes, in order.
func (iv *Interval) pids() []int {
	pids := make([]int, 0, len(iv.Procs))
	for pid := range iv.Procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// MaxRequestBytes bounds an export request's encoded size: a collector's
// OTLP/gRPC receiver takes 4 MiB by default (max_recv_msg_size_mib).
const MaxRequestBytes = 3 << 20

// Request is one encoded export request and the samples it holds: an OTLP
// ExportProfilesServiceRequest, or for Pyroscope's ingest API a gzipped
// pprof profile and the query that goes with it.
type Request struct {
	Body    []byte
	Samples uint64
	Query   string // URL query (Pyroscope's ingest), encoded
}

// Requests encodes the interval as export requests of at most maxBytes
// each, splitting it by process (a process whose profile alone is larger
// goes alone).
func (iv *Interval) Requests(res Resource, maxBytes int) ([]Request, error) {
	return iv.encode(res, iv.pids(), maxBytes, nil)
}

func (iv *Interval) encode(res Resource, pids []int, maxBytes int, out []Request) ([]Request, error) {
	b, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(iv.profilesOf(res, pids))
	if err != nil {
		return out, err
	}
	if b, err = inlineAttributes(b); err != nil {
		return out, err
	}
	if len(b) <= maxBytes || len(pids) == 1 {
		var n uint64
		for _, pid := range pids {
			for _, s := range iv.Procs[pid].Samples {
				n += uint64(s.Count)
			}
		}
		return append(out, Request{Body: b, Samples: n}), nil
	}
	half := len(pids) / 2
	if out, err = iv.encode(res, pids[:half], maxBytes, out); err != nil {
		return out, err
	}
	return iv.encode(res, pids[half:], maxBytes, out)
}

// profilesOf is the profiles of processes pids, over one dictionary: a
// resource per process, each with one CPU profile.
func (iv *Interval) profilesOf(res Resource, pids []int) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := newDictionary(pd.Dictionary())
	var key []byte
	for _, pid := range pids {
		ps := iv.Procs[pid]
		rp := pd.ResourceProfiles().AppendEmpty()
		describeResource(rp.Resource().Attributes(), ps, res)
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(scopeName)
		sp.Scope().SetVersion(res.Version)
		var cpu, alloc, inUse []*Sample
		for _, s := range ps.Samples {
			switch {
			case s.InUse:
				inUse = append(inUse, s)
			case s.Alloc:
				alloc = append(alloc, s)
			default:
				cpu = append(cpu, s)
			}
		}
		if len(cpu) > 0 || len(alloc) == 0 && len(inUse) == 0 {
			key = iv.addProfile(sp, dict, cpu, profileKind{sampleTypeType, sampleTypeUnit, periodTypeType, periodTypeUnit, res.Period,
				func(s *Sample) int64 { return s.Count }}, key)
		}
		if len(alloc) > 0 {
			// As Go's heap profiles name them, one profile a value.
			key = iv.addProfile(sp, dict, alloc, profileKind{allocObjectsType, allocObjectsUnit, allocPeriodType, allocPeriodUnit, 0,
				func(s *Sample) int64 { return s.Objects }}, key)
			key = iv.addProfile(sp, dict, alloc, profileKind{allocSpaceType, allocSpaceUnit, allocPeriodType, allocPeriodUnit, 0,
				func(s *Sample) int64 { return s.Bytes }}, key)
		}
		if len(inUse) > 0 {
			// What is alive at the interval's end, by allocation stack.
			key = iv.addProfile(sp, dict, inUse, profileKind{inUseObjectsType, allocObjectsUnit, allocPeriodType, allocPeriodUnit, 0,
				func(s *Sample) int64 { return s.Objects }}, key)
			key = iv.addProfile(sp, dict, inUse, profileKind{inUseSpaceType, allocSpaceUnit, allocPeriodType, allocPeriodUnit, 0,
				func(s *Sample) int64 { return s.Bytes }}, key)
		}
	}
	dict.finish()
	return pd
}

// profileKind is what a profile measures: its sample type and unit, its
// period's, and each sample's value.
type profileKind struct {
	sampleType, sampleUnit, periodType, periodUnit string
	period                                         int64
	value                                          func(*Sample) int64
}

// addProfile adds to sp a profile of kind of samples, over dict; key is
// scratch, returned for reuse.
func (iv *Interval) addProfile(sp pprofile.ScopeProfiles, dict *dictionary, samples []*Sample, kind profileKind, key []byte) []byte {
	prof := sp.Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(dict.str(kind.sampleType))
	prof.SampleType().SetUnitStrindex(dict.str(kind.sampleUnit))
	prof.PeriodType().SetTypeStrindex(dict.str(kind.periodType))
	prof.PeriodType().SetUnitStrindex(dict.str(kind.periodUnit))
	prof.SetPeriod(kind.period)
	prof.SetTime(pcommon.NewTimestampFromTime(iv.Start))
	prof.SetDurationNano(uint64(max(iv.End.Sub(iv.Start), 0)))
	var id [16]byte
	rand.Read(id[:])
	prof.SetProfileID(pprofile.ProfileID(id))
	// Samples in a stable order: by value, most first.
	samples = slices.Clone(samples)
	sort.SliceStable(samples, func(i, j int) bool { return kind.value(samples[i]) > kind.value(samples[j]) })
	for _, s := range samples {
		out := prof.Samples().AppendEmpty()
		var si int32
		si, key = dict.stack(iv, s.Frames, key)
		out.SetStackIndex(si)
		out.Values().Append(kind.value(s))
		if s.Thread != "" {
			out.AttributeIndices().Append(dict.attr(attrThreadName, s.Thread))
		}
		if s.State != merge.StateUnknown {
			out.AttributeIndices().Append(dict.attr(attrThreadState, s.State.String()))
		}
		for _, l := range s.Labels {
			key := attrLabelPrefix + l.Key
			if l.Key == merge.ClassLabel {
				key = attrObjectClass // no request label: the recording's own
			}
			out.AttributeIndices().Append(dict.attr(key, l.Value))
		}
	}
	return key
}

// describeResource sets the attributes of a process's resource.
func describeResource(attrs pcommon.Map, ps *ProcessSamples, res Resource) {
	attrs.PutInt(processPIDAttr, int64(ps.Process.PID))
	for _, kv := range resourceAttributes(ps, res) {
		attrs.PutStr(kv[0], kv[1])
	}
}

// resourceAttributes are the string attributes of a process's resource
// (its pid is the one number), key and value, in a stable order: what the
// process is, then the user's labels that do not replace any of those.
func resourceAttributes(ps *ProcessSamples, res Resource) [][2]string {
	p := &ps.Process
	var out [][2]string
	add := func(k, v string) {
		if v != "" {
			out = append(out, [2]string{k, v})
		}
	}
	if p.Executable != "" {
		add(executablePath, p.Executable)
		add(executableName, path.Base(p.Executable))
	}
	add(processNameAttr, p.Name)
	add(runtimeNameAttr, runtimeName)
	add(runtimeVersion, p.RubyVersion)
	add(hostNameAttr, res.Host)
	add(containerIDAttr, ps.Container)
	service := res.ServiceName
	if service == "" {
		service = p.Name
	}
	add(serviceNameAttr, service)
	own := len(out)
	keys := make([]string, 0, len(res.Labels))
	for k := range res.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != processPIDAttr && !slices.ContainsFunc(out[:own], func(kv [2]string) bool { return kv[0] == k }) {
			add(k, res.Labels[k]) // the agent's own say what the process is
		}
	}
	return out
}
