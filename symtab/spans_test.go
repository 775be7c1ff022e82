package symtab

import (
	"testing"

	"github.com/rubyperf/rubyperf/payload"
	"github.com/rubyperf/rubyperf/rubystack"
)

// TestSpanFor: which samples a name read under a GC stamp holds for, by
// the rules of a generational GC that frees only what its marking missed.
// The real-process side is TestTargetReusesAddresses (cmd/rubyperf).
func TestSpanFor(t *testing.T) {
	const max = ^uint64(0)
	minor := func(count, epoch uint64) rubystack.GCStamp { return rubystack.GCStamp{Count: count, Epoch: epoch} }
	sample := func(count, epoch uint64) payload.GCStamp {
		return payload.GCStamp{Stamped: true, Count: count, Epoch: epoch}
	}
	for _, c := range []struct {
		name   string
		sample payload.GCStamp
		now    rubystack.GCStamp
		old    bool
		want   payload.Span
	}{
		{"young, same interval: that interval only", sample(7, 3), minor(7, 3), false, payload.Span{Epoch: 3, From: 15, To: 15}},
		{"young, a GC since the sample: nothing", sample(7, 3), minor(8, 3), false, payload.Span{}},
		{"old, same interval: to the epoch's end", sample(7, 3), minor(7, 3), true, payload.Span{Epoch: 3, From: 15, To: max}},
		{"old, a GC since: from the next interval", sample(7, 3), minor(8, 3), true, payload.Span{Epoch: 3, From: 18, To: max}},
		{"old, another epoch: from the next interval of this one", sample(7, 3), minor(9, 9), false, payload.Span{}},
		{"old, in a major GC not yet swept: same interval only", sample(9, 9), rubystack.GCStamp{Count: 9, Epoch: 9},
			true, payload.Span{Epoch: 9, From: 19, To: 19}},
		{"old, in a major GC swept: to the epoch's end", sample(9, 9), rubystack.GCStamp{Count: 9, Epoch: 9, Idle: true},
			true, payload.Span{Epoch: 9, From: 19, To: max}},
		{"marking: a half of its own", payload.GCStamp{Stamped: true, Count: 9, Epoch: 9, Marking: true},
			rubystack.GCStamp{Count: 9, Epoch: 9, Marking: true}, false, payload.Span{Epoch: 9, From: 18, To: 18}},
		{"sample while marking, read after: nothing", payload.GCStamp{Stamped: true, Count: 9, Epoch: 9, Marking: true},
			rubystack.GCStamp{Count: 9, Epoch: 9}, false, payload.Span{}},
		{"sample while a minor GC marked, read in its sweep: both intervals", payload.GCStamp{Stamped: true, Count: 9, Epoch: 3, Marking: true},
			minor(9, 3), false, payload.Span{Epoch: 3, From: 18, To: 19}},
		{"old, sample while a minor GC marked, read in its sweep: from the sample on", payload.GCStamp{Stamped: true, Count: 9, Epoch: 3, Marking: true},
			minor(9, 3), true, payload.Span{Epoch: 3, From: 18, To: max}},
		{"sample while a minor GC marked, read after the next GC: nothing", payload.GCStamp{Stamped: true, Count: 9, Epoch: 3, Marking: true},
			minor(10, 3), false, payload.Span{}},
		{"sample while a minor GC marked, read in a major GC since: nothing", payload.GCStamp{Stamped: true, Count: 9, Epoch: 3, Marking: true},
			rubystack.GCStamp{Count: 10, Epoch: 10, Marking: true}, false, payload.Span{}},
		{"compacting now: nothing", sample(9, 9), rubystack.GCStamp{Count: 9, Epoch: 9, Compacting: true}, true, payload.Span{}},
		{"sample while compacting: not the same interval", payload.GCStamp{Stamped: true, Count: 9, Epoch: 9, Compacting: true},
			rubystack.GCStamp{Count: 9, Epoch: 9, Idle: true}, true, payload.Span{Epoch: 9, From: 20, To: max}},
		{"unstamped sample, young: nothing", payload.GCStamp{}, minor(7, 3), false, payload.Span{}},
	} {
		if got := SpanFor(c.sample, c.now, c.old); got != c.want {
			t.Errorf("%s: SpanFor(%+v, %+v, old %v) = %+v, want %+v", c.name, c.sample, c.now, c.old, got, c.want)
		}
		if got := SpanFor(c.sample, c.now, c.old); got != (payload.Span{}) && !got.Covers(c.sample) && got.From <= c.sample.Interval() {
			t.Errorf("%s: a span from the sample's interval that does not cover it: %+v", c.name, got)
		}
	}
}

// TestSpanCovers: a span holds for samples of its epoch and intervals, and
// never while objects move; the full span, for unstamped samples only.
func TestSpanCovers(t *testing.T) {
	s := payload.Span{Epoch: 3, From: 15, To: 21}
	for _, c := range []struct {
		st   payload.GCStamp
		want bool
	}{
		{payload.GCStamp{Stamped: true, Count: 7, Epoch: 3}, true},
		{payload.GCStamp{Stamped: true, Count: 10, Epoch: 3}, true},
		{payload.GCStamp{Stamped: true, Count: 11, Epoch: 3}, false},
		{payload.GCStamp{Stamped: true, Count: 6, Epoch: 3}, false},
		{payload.GCStamp{Stamped: true, Count: 8, Epoch: 8}, false},
		{payload.GCStamp{Stamped: true, Count: 8, Epoch: 3, Compacting: true}, false},
		{payload.GCStamp{}, false},
	} {
		if got := s.Covers(c.st); got != c.want {
			t.Errorf("%+v covers %+v: %v, want %v", s, c.st, got, c.want)
		}
	}
	if !payload.FullSpan.Covers(payload.GCStamp{}) || payload.FullSpan.Covers(payload.GCStamp{Stamped: true, Count: 1}) {
		t.Errorf("the full span holds for unstamped samples and only them")
	}
}

// TestSymbolTableSpans: a key with names for different spans gives each
// sample the name that holds for it, ReplacedLabel where none does, and
// keeps them through Encode and Decode.
func TestSymbolTableSpans(t *testing.T) {
	tab := New()
	k := FrameKey{PID: 1, Iseq: 0x1000, PC: 0x1010}
	first := FrameInfo{Label: "Rounds.outer_1", Path: "rounds.rb", HasPath: true, Line: 12}
	second := FrameInfo{Label: "Rounds.outer_2", Path: "rounds.rb", HasPath: true, Line: 22}
	tab.add(k, Named{FrameInfo: first, Span: payload.Span{Epoch: 3, From: 15, To: 15}})
	tab.add(k, Named{FrameInfo: first, Span: payload.Span{Epoch: 3, From: 17, To: 17}}) // merges
	tab.add(k, Named{FrameInfo: second, Span: payload.Span{Epoch: 9, From: 19, To: ^uint64(0)}})
	if n := len(tab.Frames[k]); n != 2 {
		t.Fatalf("%d names, want 2 (adjacent intervals of one name merge): %+v", n, tab.Frames[k])
	}
	check := func(tab *Table) {
		t.Helper()
		for _, c := range []struct {
			st   payload.GCStamp
			want string
		}{
			{payload.GCStamp{Stamped: true, Count: 7, Epoch: 3}, first.Label},
			{payload.GCStamp{Stamped: true, Count: 8, Epoch: 3}, first.Label},
			{payload.GCStamp{Stamped: true, Count: 9, Epoch: 3}, ReplacedLabel},
			{payload.GCStamp{Stamped: true, Count: 9, Epoch: 9}, second.Label},
			{payload.GCStamp{Stamped: true, Count: 500, Epoch: 9}, second.Label},
			{payload.GCStamp{Stamped: true, Count: 600, Epoch: 600}, ReplacedLabel},
		} {
			p := &payload.Payload{PID: 1, GC: c.st, Frames: []payload.Frame{{Iseq: 0x1000, PC: 0x1010}}}
			if got := tab.Stack(p)[0].Label; got != c.want {
				t.Errorf("sample %+v: %q, want %q", c.st, got, c.want)
			}
		}
	}
	check(tab)
	// A sample carries the ids of the names decided for it; they survive
	// Encode and Decode.
	stamps := []payload.GCStamp{{Stamped: true, Count: 7, Epoch: 3}, {Stamped: true, Count: 9, Epoch: 3}, {Stamped: true, Count: 9, Epoch: 9}}
	var ids []uint64
	for _, st := range stamps {
		p := &payload.Payload{PID: 1, GC: st, Frames: []payload.Frame{{Iseq: 0x1000, PC: 0x1010}, {Iseq: 0x5000, PC: 0x5010}}}
		ids = append(ids, tab.NameIDs(p, nil)...)
	}
	b, err := tab.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{first.Label, "unknown", ReplacedLabel, "unknown", second.Label, "unknown"} {
		info, named, ok := back.FrameName(ids[i])
		got := info.Label
		switch {
		case !named:
			got = "unknown"
		case !ok:
			got = ReplacedLabel
		}
		if got != want {
			t.Errorf("name %d (id %d): %q, want %q", i, ids[i], got, want)
		}
	}

	// A bounded history: code churning at one address keeps its newest names.
	for i := uint64(0); i < 3*maxNamesPerKey; i++ {
		tab.add(k, Named{FrameInfo: FrameInfo{Label: "churn", Line: int64(i)}, Span: payload.Span{Epoch: 100 + i, From: 1, To: 1}})
	}
	if n := len(tab.Frames[k]); n != maxNamesPerKey {
		t.Errorf("%d names kept, want at most %d", n, maxNamesPerKey)
	}
	if last := tab.Frames[k][maxNamesPerKey-1]; last.Line != 3*maxNamesPerKey-1 {
		t.Errorf("the newest name was dropped: %+v", last)
	}
}

// TestCFrameKey: a C frame's key leaves out its iseq slot (an IFUNC's
// block function, new on every call), so one name serves every call.
func TestCFrameKey(t *testing.T) {
	a := Key(1, 0, payload.Frame{Iseq: 0x1000, CME: 0x2000, CFrame: true})
	b := Key(1, 0, payload.Frame{Iseq: 0x3000, CME: 0x2000, CFrame: true})
	if a != b {
		t.Errorf("two calls of one C method have keys %+v and %+v", a, b)
	}
	if Key(1, 0, payload.Frame{Iseq: 0x1000, PC: 8}) == Key(1, 0, payload.Frame{Iseq: 0x3000, PC: 8}) {
		t.Errorf("Ruby frames of two iseqs share a key")
	}
}
