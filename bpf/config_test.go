package bpf

import (
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestConfigForBuiltinLayouts: every built-in layout fits the program's
// reads (the execution context in one read, control frames in chunks), and
// a layout that does not is refused rather than read wrong.
func TestConfigForBuiltinLayouts(t *testing.T) {
	for _, v := range []string{"3.1.2", "3.2.0", "3.3.8", "3.4.5", "4.0.0"} {
		l, err := rubybuild.BuiltinLayout(v, "x86_64")
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		cfg, err := ConfigFor(l, -8)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		ec := l.ExecutionContext
		if int64(cfg.EcStart)+int64(cfg.EcCfp) != ec.CFP || int64(cfg.EcStart)+int64(cfg.EcVmStack) != ec.VMStack ||
			int64(cfg.EcStart)+int64(cfg.EcVmStackSize) != ec.VMStackSize || cfg.EcSpan == 0 || cfg.EcSpan > 64 {
			t.Errorf("%s: config %+v does not locate ec fields %+v", v, cfg, ec)
		}
		// Every built-in layout gives GC stamps, in the program's one read.
		if err := cfg.StampGC(l, 0x7f0000000000); err != nil {
			t.Errorf("%s: %v", v, err)
		} else if g := l.GC; cfg.GcStart+uint64(cfg.GcCount) != 0x7f0000000000+uint64(g.Count) ||
			cfg.GcStart+uint64(cfg.GcEpoch) != 0x7f0000000000+uint64(g.LastMajorGC) ||
			cfg.GcStart+uint64(cfg.GcFlags) != 0x7f0000000000+uint64(g.Mode.Offset) || cfg.GcSpan > gcSpan {
			t.Errorf("%s: config %+v does not locate the GC fields %+v", v, cfg, g)
		}
		far := *l
		far.GC.LastMajorGC = far.GC.Count + gcSpan
		if err := cfg.StampGC(&far, 0x7f0000000000); err == nil {
			t.Errorf("%s: GC fields %d bytes apart: no refusal", v, gcSpan)
		}
		spread := *l
		spread.ExecutionContext.CFP = ec.VMStack + 64
		if _, err := ConfigFor(&spread, -8); err == nil || !strings.Contains(err.Error(), "execution context") {
			t.Errorf("%s: fields 64 bytes apart: err %v, want a refusal", v, err)
		}
	}
}
