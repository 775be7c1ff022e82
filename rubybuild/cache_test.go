package rubybuild

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestCache: a second Binary of the same file, opened by another name, is
// given the Layout, Anchors and refill sites the first worked out, its Source naming the
// second's path; a copy of the file (another inode) and a file touched since
// are worked out again, to the same result.
func TestCache(t *testing.T) {
	for _, flavor := range []string{"source-3.3-static", "debian-3.3", "source-3.4-shared"} {
		t.Run(flavor, func(t *testing.T) {
			vm := testruby.Get(t, flavor).VM
			dir := t.TempDir()
			alias := filepath.Join(dir, "alias")
			if err := os.Symlink(vm, alias); err != nil {
				t.Fatal(err)
			}
			copied := filepath.Join(dir, filepath.Base(vm))
			testruby.CopyFile(t, vm, copied)

			var c Cache
			open := func(path string, cache *Cache) (*Binary, *Layout, Anchors) {
				t.Helper()
				b, err := OpenBinary(path, OpenOptions{Cache: cache})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				l, err := b.Layout()
				if err != nil {
					t.Fatal(err)
				}
				return b, l, b.Anchors(l)
			}
			b1, l1, a1 := open(vm, &c)
			b2, l2, a2 := open(alias, &c)
			_, l0, a0 := open(alias, nil) // no cache: the reference
			if b1.shared == nil || b2.shared != b1.shared {
				t.Fatalf("the second open was not served from the cache")
			}
			if l2 == l1 {
				t.Error("the second Binary has the first's Layout itself, not its own copy")
			}
			if l1.FromDWARF() {
				if want := "dwarf:" + alias; l2.Source != want {
					t.Errorf("Source %q, want %q", l2.Source, want)
				}
			}
			if !reflect.DeepEqual(l2, l0) || !reflect.DeepEqual(a2, a0) || !reflect.DeepEqual(a1.renamed(l1.Source, l0.Source), a0) {
				t.Errorf("cached layout or anchors differ from those worked out afresh:\n%+v\n%+v", a2, a0)
			}
			// The refill sites too: the second is given the first's sweep.
			r1, err1 := b1.RefillSites(l1)
			r2, err2 := b2.RefillSites(l2)
			if err1 != nil || err2 != nil || r2 != r1 {
				t.Errorf("refill sites %p (%v), then %p (%v): the second not the first's", r1, err1, r2, err2)
			}

			b3, l3, a3 := open(copied, &c)
			if b3.shared == b1.shared {
				t.Error("a copy of the file (another inode) was served from the cache")
			}
			a3 = a3.renamed(l3.Source, l0.Source)
			l3.Source = l0.Source
			if !reflect.DeepEqual(l3, l0) || !reflect.DeepEqual(a3, a0) {
				t.Error("the copy's layout or anchors differ")
			}
			fi, err := os.Stat(copied)
			if err != nil {
				t.Fatal(err)
			}
			later := fi.ModTime().Add(1e9)
			if err := os.Chtimes(copied, later, later); err != nil {
				t.Fatal(err)
			}
			if b4, _, _ := open(copied, &c); b4.shared == b3.shared {
				t.Error("a file touched since was served from the cache")
			}
		})
	}
}
