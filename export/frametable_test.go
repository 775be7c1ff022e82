package export

import (
	"slices"
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// TestFrameTable: what each kind of frame becomes, as FrameTable's
// comment says, for pprof and OTLP alike.
func TestFrameTable(t *testing.T) {
	ft := NewFrameTable()
	method := merge.Frame{Kind: merge.KindCFunc, Name: "memcpy"}                     // a C method with no caller's file
	sym := merge.Frame{Kind: merge.KindNative, Name: "memcpy", Addr: 0x7f0000001000} // no mapping known
	lib := native("rb_ary_each", libRuby, 0x1000, 0x10)
	exe := native("main", exeRuby, 0x60, 0x4a)
	k1, k2 := kernel("do_syscall_64", 0xffffffff81000000, 0), kernel("ksys_read", 0xffffffff81005000, 0)
	state := merge.Frame{Kind: merge.KindState, Name: "(blocked)"}
	var locs []int
	for _, f := range []merge.Frame{method, sym, lib, exe, k1, k2, state, lib} {
		locs = append(locs, ft.Location(&f))
	}
	if locs[7] != locs[2] || len(ft.Locations) != 7 {
		t.Errorf("locations %v of %d: want the same frame at the same location, and no other shared", locs, len(ft.Locations))
	}
	c, s := ft.Locations[locs[0]], ft.Locations[locs[1]]
	if c.Function == s.Function || ft.Functions[c.Function].SystemName != "" || ft.Functions[s.Function].SystemName != "memcpy" {
		t.Errorf("a C method and a symbol of one name share a function, or have the wrong system name: %+v", ft.Functions)
	}
	if c.Type != FrameRuby || c.Mapping != -1 || s.Type != FrameNative || s.Mapping != -1 || s.Address != 0 {
		t.Errorf("C method %+v, symbol of no known mapping %+v: want neither mapping nor address", c, s)
	}
	kl := ft.Locations[locs[4]]
	km := ft.Mappings[kl.Mapping]
	if kl.Type != FrameKernel || ft.Locations[locs[5]].Mapping != kl.Mapping || km.File != "[kernel.kallsyms]" ||
		km.Start != k1.Addr || km.Limit != k2.Addr+1 {
		t.Errorf("kernel location %+v in %+v: want one mapping over the addresses seen", kl, km)
	}
	if st := ft.Locations[locs[6]]; st.Type != FramePseudo || st.Mapping != -1 || ft.Functions[st.Function] != (Function{Name: "(blocked)"}) {
		t.Errorf("state frame %+v", st)
	}
	ids := ft.MappingIDs()
	var files []string
	for id := 1; id <= len(ids); id++ {
		files = append(files, ft.Mappings[slices.Index(ids, id)].File)
	}
	if want := []string{exeRuby.file, libRuby.file, "[kernel.kallsyms]"}; !slices.Equal(files, want) {
		t.Errorf("mappings by id %v, want %v (address order)", files, want)
	}
}
