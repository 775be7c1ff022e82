package readback

import (
	"strings"
	"testing"
)

// TestDecodeBombsAllocate: a parse bomb of issue 27, as a section
// of text the fuzz target's bound applies to (allocPerByte a byte of
// text), is refused, within it: 64 KiB of gzip of one kallsyms line
// repeated (past maxKallsymsRatio). (The Ruby symbol table's: symtab's.)
func TestDecodeBombsAllocate(t *testing.T) {
	var err error
	lines := gzipped([]byte(strings.Repeat("ffffffff81000000 T a\n", 1<<20)))
	limit := int64(len(lines))*maxKallsymsRatio + 64<<10
	checkAllocated(t, "one kallsyms line repeated", allocated(func() { _, err = decodeKallsyms(lines) }), limit)
	if err == nil || !strings.Contains(err.Error(), "compresses under") {
		t.Errorf("%d bytes of kallsyms gzip of 21 MiB decode: %v", len(lines), err)
	}
}
