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
		spread := *l
		spread.ExecutionContext.CFP = ec.VMStack + 64
		if _, err := ConfigFor(&spread, -8); err == nil || !strings.Contains(err.Error(), "execution context") {
			t.Errorf("%s: fields 64 bytes apart: err %v, want a refusal", v, err)
		}
	}
}
