package rubystack

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// regions is target memory made by a test: blocks at their addresses.
type regions map[uint64][]byte

func (m regions) ReadAt(p []byte, addr uint64) error {
	for base, b := range m {
		if addr >= base && addr-base <= uint64(len(b)) && uint64(len(p)) <= uint64(len(b))-(addr-base) {
			copy(p, b[addr-base:])
			return nil
		}
	}
	return errors.New("unmapped")
}

// Addresses of a synthetic heap.
const (
	synVMPtr   = 0x10000
	synVM      = 0x20000
	synObjs    = 0x30000
	synList    = 0x40000
	synPage    = 0x50000 // struct heap_page i at synPage + i*0x1000
	synBody    = 0x100000
	synBodyGap = 0x100000 // page i's slots at synBody + i*synBodyGap
)

// syntheticHeap lays out a heap the way layout l lists it: the VM, its
// objspace, the page list (an array or an rb_darray) and one page per
// bodies element, each body slotSize-byte slots. header, when not nil,
// replaces each page's struct bytes.
func syntheticHeap(t testing.TB, l *rubybuild.Layout, slotSize int, bodies [][]byte, header []byte) regions {
	m := regions{}
	word := func(b []byte, off int64, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	vmp := make([]byte, 8)
	word(vmp, 0, synVM)
	m[synVMPtr] = vmp
	vm := make([]byte, l.VM.ObjSpace+8)
	word(vm, l.VM.ObjSpace, synObjs)
	m[synVM] = vm
	h := l.Heap
	objs := make([]byte, 4096)
	list := make([]byte, 16+8*len(bodies))
	at := int64(0)
	if h.Darray {
		word(list, h.DarrayLen, uint64(len(bodies)))
		at = h.DarrayData
		word(objs, h.Pages, synList)
	} else {
		word(objs, h.Pages, synList)
		word(objs, h.Count, uint64(len(bodies)))
	}
	m[synObjs] = objs
	for i, body := range bodies {
		page := uint64(synPage + i*0x1000)
		word(list, at+int64(8*i), page)
		ph := make([]byte, 64)
		if header != nil {
			copy(ph, header)
		} else {
			word(ph, h.Start, uint64(synBody+i*synBodyGap))
			binary.LittleEndian.PutUint16(ph[h.TotalSlots.Offset:], uint16(len(body)/slotSize))
			binary.LittleEndian.PutUint16(ph[h.SlotSize.Offset:], uint16(slotSize))
		}
		m[page] = ph
		m[uint64(synBody+i*synBodyGap)] = body
	}
	m[synList] = list
	return m
}

// slots makes a page body of 40-byte slots holding these flags and
// klasses.
func slots(objs ...[2]uint64) []byte {
	b := make([]byte, 40*len(objs))
	for i, o := range objs {
		binary.LittleEndian.PutUint64(b[40*i:], o[0])
		binary.LittleEndian.PutUint64(b[40*i+8:], o[1])
	}
	return b
}

// TestHeapCensusSynthetic: the census counts free slots, types and hidden
// objects page by page, from a page list as an array (3.3) or an rb_darray
// (3.4), and counts a page it cannot read as unread.
func TestHeapCensusSynthetic(t *testing.T) {
	for _, version := range []string{"3.3.8", "3.4.1"} {
		t.Run(version, func(t *testing.T) {
			l, err := rubybuild.BuiltinLayout(version, "x86_64")
			if err != nil {
				t.Fatal(err)
			}
			c := l.Constants
			str, imemo, obj := uint64(c["RUBY_T_STRING"]), uint64(c["RUBY_T_IMEMO"]), uint64(c["RUBY_T_OBJECT"])
			page1 := slots([2]uint64{str, 0}, [2]uint64{0, 0}, [2]uint64{imemo, 0x1234}, [2]uint64{str | 1<<12, 0})
			page2 := slots([2]uint64{0, 0}, [2]uint64{obj, 0xdead0}) // a klass that is not mapped
			m := syntheticHeap(t, l, 40, [][]byte{page1, page2, {}}, nil)
			delete(m, synBody+2*synBodyGap)
			m[synPage+2*0x1000] = make([]byte, 64) // 4.0 zeroes an empty page's struct
			r := newReader(1, m, l, 0, synVMPtr, 0)
			got, err := r.HeapCensus(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got.Pages != 3 || got.Slots != 6 || got.FreeSlots != 2 || got.HeapBytes != 240 || got.UnreadPages != 0 {
				t.Errorf("census %+v", got)
			}
			want := map[string]Count{"T_STRING": {Objects: 2, Bytes: 80}, "T_IMEMO": {Objects: 1, Bytes: 40}, "T_OBJECT": {Objects: 1, Bytes: 40}}
			for k, v := range want {
				if got.ByType[k] != v {
					t.Errorf("type %s: %+v, want %+v", k, got.ByType[k], v)
				}
			}
			if len(got.ByType) != len(want) {
				t.Errorf("types %v", got.ByType)
			}
			if got.ByClass["(T_STRING)"].Objects != 2 || got.ByClass["(T_IMEMO)"].Objects != 1 ||
				got.ByClass[UnnamedClassLabel].Objects != 1 || got.UnnamedClass != 1 {
				t.Errorf("classes %v", got.ByClass)
			}

			// A page whose slots cannot be read is counted, not fatal.
			delete(m, synBody+synBodyGap)
			got, err = r.HeapCensus(context.Background())
			if err != nil || got.UnreadPages != 1 || got.Slots != 4 {
				t.Errorf("a page gone: %+v, %v", got, err)
			}
		})
	}
}

// TestHeapCensusBounds: a page list longer than any heap, and a page
// claiming more slots than a page holds, are refused or counted unread,
// never read.
func TestHeapCensusBounds(t *testing.T) {
	l, err := rubybuild.BuiltinLayout("3.3.8", "x86_64")
	if err != nil {
		t.Fatal(err)
	}
	m := syntheticHeap(t, l, 40, [][]byte{slots([2]uint64{0, 0})}, nil)
	binary.LittleEndian.PutUint64(m[synObjs][l.Heap.Count:], maxHeapPages+1)
	r := newReader(1, m, l, 0, synVMPtr, 0)
	if _, err := r.HeapCensus(context.Background()); err == nil {
		t.Errorf("%d pages: no error", maxHeapPages+1)
	}
	hdr := make([]byte, 64)
	binary.LittleEndian.PutUint64(hdr[l.Heap.Start:], synBody)
	binary.LittleEndian.PutUint16(hdr[l.Heap.TotalSlots.Offset:], 0xffff)
	binary.LittleEndian.PutUint16(hdr[l.Heap.SlotSize.Offset:], 0xfff8)
	m = syntheticHeap(t, l, 40, [][]byte{slots([2]uint64{0, 0})}, hdr)
	r = newReader(1, m, l, 0, synVMPtr, 0)
	if c, err := r.HeapCensus(context.Background()); err != nil || c.UnreadPages != 1 || c.Slots != 0 {
		t.Errorf("a 4 GiB page: %+v, %v", c, err)
	}
}

// FuzzHeapCensus counts mutated heaps: whatever the page struct and slot
// bytes, the census returns without panicking, within its bounds.
func FuzzHeapCensus(f *testing.F) {
	l, err := rubybuild.BuiltinLayout("3.4.1", "x86_64")
	if err != nil {
		f.Fatal(err)
	}
	hdr := make([]byte, 64)
	binary.LittleEndian.PutUint64(hdr[l.Heap.Start:], synBody)
	binary.LittleEndian.PutUint16(hdr[l.Heap.TotalSlots.Offset:], 2)
	binary.LittleEndian.PutUint16(hdr[l.Heap.SlotSize.Offset:], 40)
	f.Add(hdr, slots([2]uint64{5, 0}, [2]uint64{2, synVM}))
	f.Fuzz(func(t *testing.T, header, body []byte) {
		m := syntheticHeap(t, l, 40, [][]byte{body, body}, header)
		r := newReader(1, m, l, 0, synVMPtr, 0)
		start := time.Now()
		c, err := r.HeapCensus(context.Background())
		if err == nil && c.Slots > uint64(2*maxPageSlots) {
			t.Fatalf("%d slots in two pages", c.Slots)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("census took %v", d)
		}
		// The same pages written as a heap dump: every line JSON, no more
		// lines than slots.
		var out bytes.Buffer
		dump, err := r.DumpHeap(context.Background(), &out)
		if err != nil {
			return
		}
		lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
		if dump.Objects > dump.Slots || out.Len() > 0 && uint64(len(lines)) != dump.Objects {
			t.Fatalf("%d objects of %d slots, %d lines", dump.Objects, dump.Slots, len(lines))
		}
		for _, line := range lines {
			if out.Len() > 0 && !json.Valid(line) {
				t.Fatalf("not JSON: %q", line)
			}
		}
	})
}

// TestDumpNamesAreJSON: a class name read from a target, whatever its
// bytes, is written as a valid JSON string.
func TestDumpNamesAreJSON(t *testing.T) {
	for _, name := range []string{"Foo::Bar", "A\"B\\C", "\x01\v\a\x7f", "\xff\xfe bad", "Ünïcødé"} {
		b := appendJSONString([]byte(`{"name":`), name)
		b = append(b, '}')
		if !json.Valid(b) {
			t.Errorf("%q written as %s: not JSON", name, b)
		}
	}
}
