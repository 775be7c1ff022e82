package recording

import (
	"strings"
	"testing"
)

// TestDecodeBombsAllocate: the parse bombs of issue 27, as sections of
// text the fuzz targets' bound applies to (allocPerByte a byte of text),
// are refused, within it: 10,000 empty frames in a Ruby symbol table, and
// 64 KiB of gzip of one kallsyms line repeated (past maxKallsymsRatio).
func TestDecodeBombsAllocate(t *testing.T) {
	frames := []byte(`{"version":3,"frames":[` + strings.Repeat(`{},`, 10000) + `{}]}`)
	var err error
	checkAllocated(t, "empty frames", allocated(func() { _, err = DecodeSymbolTable(gzipped(frames)) }), int64(len(frames)))
	if err == nil {
		t.Errorf("a table of empty frames decodes")
	}
	lines := gzipped([]byte(strings.Repeat("ffffffff81000000 T a\n", 1<<20)))
	limit := int64(len(lines))*maxKallsymsRatio + 64<<10
	checkAllocated(t, "one kallsyms line repeated", allocated(func() { _, err = decodeKallsyms(lines) }), limit)
	if err == nil || !strings.Contains(err.Error(), "compresses under") {
		t.Errorf("%d bytes of kallsyms gzip of 21 MiB decode: %v", len(lines), err)
	}
}
