package readback

import (
	"testing"

	"github.com/rubyperf/rubyperf/merge"
)

// TestReadStockPerfCallchain: a file stock perf recorded with -g (no stack
// copies) gives native stacks from its callchains.
func TestReadStockPerfCallchain(t *testing.T) {
	named := 0
	st, err := ReadStacks("../perfdata/testdata/perf-fp.data", ReadOptions{}, func(s merge.Stack) error {
		for _, f := range s.Frames {
			if f.Kind == merge.KindNative && f.Name != "[unknown]" {
				named++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples == 0 || named == 0 || st.NoPayload != st.Samples {
		t.Errorf("%+v samples, %d named native frames", st, named)
	}
}
