package symtab

import (
	"strings"
	"testing"
)

// TestDecodeBombsAllocate: a parse bomb of issue 27, as a section of text
// the fuzz target's bound applies to (allocPerByte a byte of text), is
// refused, within it: 10,000 empty frames in a Ruby symbol table (the
// kernel symbol table's: recording's).
func TestDecodeBombsAllocate(t *testing.T) {
	frames := []byte(`{"version":3,"frames":[` + strings.Repeat(`{},`, 10000) + `{}]}`)
	var err error
	checkAllocated(t, "empty frames", allocated(func() { _, err = Decode(gzipped(frames)) }), int64(len(frames)))
	if err == nil {
		t.Errorf("a table of empty frames decodes")
	}
}
