package rubystack

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// labelReader is a Reader over no process, with the layout of version (a
// built-in table) given what a DWARF layout adds for labels.
func labelReader(t testing.TB, version string) *Reader {
	l, err := rubybuild.BuiltinLayout(version, "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	return newReader(1, copiedMemory{}, l, 0, 0, 0)
}

// stringCopy is what the program copies of a String: its object's first 64
// bytes and, for a heap String, its bytes' first 48.
func stringCopy(r *Reader, v uint64, s string) ValueCopy {
	l, c := r.Layout, r.Layout.Constants
	obj := make([]byte, 64)
	flags := uint64(c["RUBY_T_STRING"])
	switch {
	case len(s) <= 64-int(l.String.EmbedBytes) && l.Capabilities.StringLenField:
		binary.LittleEndian.PutUint64(obj[l.String.Len:], uint64(len(s)))
		copy(obj[l.String.EmbedBytes:], s)
	case len(s) <= 64-int(l.String.EmbedBytes) && l.Capabilities.StringEmbedLenInFlags:
		flags |= uint64(len(s)) << uint64(c["RSTRING_EMBED_LEN_SHIFT"])
		copy(obj[l.String.EmbedBytes:], s)
	default:
		flags |= uint64(c["RSTRING_NOEMBED"])
		lenAt := l.String.HeapLen
		if l.Capabilities.StringLenField {
			lenAt = l.String.Len
		}
		binary.LittleEndian.PutUint64(obj[lenAt:], uint64(len(s)))
		binary.LittleEndian.PutUint64(obj[l.String.HeapPtr:], 0x7f0000900000)
		ext := make([]byte, 48)
		copy(ext, s)
		binary.LittleEndian.PutUint64(obj, flags)
		return ValueCopy{Value: v, Obj: obj, Ext: ext}
	}
	binary.LittleEndian.PutUint64(obj, flags)
	return ValueCopy{Value: v, Obj: obj, Ext: make([]byte, 48)}
}

// TestDescribeValue: label values read from what the program copied, on
// the layouts of 3.1 (embedded length in the flags) and 3.3 (a length
// field): short and long Strings (cut with "…"), Integers, nil, true,
// false; a copy that is not an object is an error, never a guess.
func TestDescribeValue(t *testing.T) {
	for _, version := range []string{"3.1.2", "3.3.8"} {
		r := labelReader(t, version)
		c := r.Layout.Constants
		long := strings.Repeat("x", 100)
		for _, tc := range []struct {
			v    ValueCopy
			want string
		}{
			{stringCopy(r, 0x7f0000800000, "r42"), "r42"},
			{stringCopy(r, 0x7f0000800000, long), strings.Repeat("x", 48) + "…"},
			{ValueCopy{Value: 2*42 + 1}, "42"},
			{ValueCopy{Value: uint64(c["RUBY_Qnil"])}, "nil"},
			{ValueCopy{Value: uint64(c["RUBY_Qtrue"])}, "true"},
			{ValueCopy{Value: uint64(c["RUBY_Qfalse"])}, "false"},
		} {
			got, err := r.DescribeValue(tc.v)
			if err != nil || got != tc.want {
				t.Errorf("%s: %#x: %q, %v; want %q", version, tc.v.Value, got, err, tc.want)
			}
		}
		if got, err := r.DescribeValue(ValueCopy{Value: 0x7f0000800000, Obj: make([]byte, 64)}); err == nil {
			t.Errorf("%s: a zero copy reads as %q", version, got)
		}
	}
}

// FuzzDescribeValue: copied bytes from a target never panic the reader and
// give bounded text.
func FuzzDescribeValue(f *testing.F) {
	r := labelReader(f, "3.3.8")
	s := stringCopy(r, 0x7f0000800000, strings.Repeat("y", 60))
	f.Add(s.Value, s.Obj, s.Ext)
	f.Add(uint64(85), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, v uint64, obj, ext []byte) {
		out, err := r.DescribeValue(ValueCopy{Value: v, Obj: obj, Ext: ext})
		if err == nil && len(out) > maxLabelBytes+len("…") {
			t.Fatalf("%d bytes", len(out))
		}
	})
}
