package rubystack

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
)

// TestTablesUpToDate regenerates each built-in table from the DWARF of the
// build it came from and compares it with the committed file (run
// `make tables` after changing what the Layout reads).
func TestTablesUpToDate(t *testing.T) {
	for _, c := range []struct{ flavor, file string }{
		{"3.1.2-shared", "table_3_1_2_x86_64.go"},
		{"3.3.8-static", "table_3_3_8_x86_64.go"},
	} {
		t.Run(c.flavor, func(t *testing.T) {
			b, err := OpenBinary(testruby.Get(t, c.flavor).VM, OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			l, err := b.LayoutFromDWARF()
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.GoTable(fmt.Sprintf("Ruby %s %s, DWARF of %s", l.Version, l.Arch, filepath.Base(b.Path)))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale: run make tables", c.file)
			}
		})
	}
}

// TestTableLayoutEqualsDWARFLayout: the Layout resolved from a table row is
// the Layout resolved from the DWARF it was generated from.
func TestTableLayoutEqualsDWARFLayout(t *testing.T) {
	for _, flavor := range []string{"3.1.2-shared", "3.3.8-static"} {
		b, err := OpenBinary(testruby.Get(t, flavor).VM, OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fromDWARF, err := b.LayoutFromDWARF()
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		row, ok := tableRow(fromDWARF.Version, fromDWARF.Arch)
		if !ok {
			t.Fatalf("no table row for %s", flavor)
		}
		fromTable, err := resolveLayout(fromDWARF.Version, fromDWARF.Arch, "table", row.Structs, row.Constants)
		if err != nil {
			t.Fatal(err)
		}
		a, b2 := fromDWARF.fields(), fromTable.fields()
		for i := range a {
			if *a[i].dst != *b2[i].dst {
				t.Errorf("%s: %s.%s: DWARF %d, table %d", flavor, a[i].strct, a[i].member, *a[i].dst, *b2[i].dst)
			}
		}
		if fromDWARF.Capabilities != fromTable.Capabilities {
			t.Errorf("%s: capabilities differ: DWARF %+v, table %+v", flavor, fromDWARF.Capabilities, fromTable.Capabilities)
		}
	}
}
