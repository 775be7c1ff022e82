package rubystack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
)

// TestLimitStrings: a reader told to read at most n bytes of a String reads
// a long class name, method name and path as their first n bytes, and the
// same reader without the limit reads them whole.
func TestLimitStrings(t *testing.T) {
	r := testruby.Get(t, "debian-3.3")
	cls, meth := "K"+strings.Repeat("k", 2000), "m"+strings.Repeat("m", 3000)
	script := filepath.Join(t.TempDir(), strings.Repeat("d", 200), strings.Repeat("f", 200)+".rb")
	if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
		t.Fatal(err)
	}
	src := "class " + cls + "\n  def " + meth + "\n    STDOUT.puts 'ready'; STDOUT.flush; sleep\n  end\nend\n" + cls + ".new." + meth + "\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := testruby.Start(t, r, script)
	for _, limit := range []int{0, 100} {
		rd := liveReader(t, cmd.Process.Pid)
		rd.LimitStrings(limit)
		stacks, err := rd.Snapshot()
		testskip.Privileged(t, err)
		var frame *Frame
		for _, s := range stacks {
			for i, f := range s.Frames {
				if strings.HasPrefix(f.Label, "Kkkk") {
					frame = &s.Frames[i]
				}
			}
		}
		if frame == nil {
			t.Fatalf("LimitStrings(%d): no frame of the long-named method; stacks: %+v", limit, stacks)
		}
		gotCls, gotMeth, _ := strings.Cut(frame.Label, "#")
		wantCls, wantMeth, wantPath := cls, meth, script
		if limit > 0 {
			wantCls, wantMeth, wantPath = cls[:limit], meth[:limit], script[:limit]
		}
		if gotCls != wantCls || gotMeth != wantMeth || frame.Path != wantPath {
			t.Errorf("LimitStrings(%d): label of %d+%d bytes, path of %d; want the first %d+%d and %d bytes",
				limit, len(gotCls), len(gotMeth), len(frame.Path), len(wantCls), len(wantMeth), len(wantPath))
		}
	}
}
