package rubystack

import (
	"errors"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestLoadedWhileLoaderWorks: an address inside libruby's image that no
// mapping covers yet (the loader maps the zero-filled data last) means the
// VM is not ready; an address outside the image is left for the layout
// check to refuse; a covered address is fine.
func TestLoadedWhileLoaderWorks(t *testing.T) {
	b, err := rubybuild.OpenBinary(testruby.Get(t, "source-3.1-shared").VM, rubybuild.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const bias = 0x7f0000000000
	_, end := b.Image()
	if end == 0 {
		t.Fatal("no PT_LOAD end")
	}
	bss := bias + end - 16
	// pid 0 has no /proc maps, so only the snapshot below counts.
	p := &Process{PID: 0, Binary: b, Bias: bias,
		Maps: []Mapping{{Start: bias, End: bias + 0x1000, Path: "libruby.so"}}}
	if err := p.loaded(bss); !errors.Is(err, ErrVMNotReady) {
		t.Errorf("unmapped address inside the image: %v, want ErrVMNotReady", err)
	}
	if err := p.loaded(bias + end + 0x100000); err != nil {
		t.Errorf("address outside the image: %v, want nil (CheckLayout refuses it)", err)
	}
	// The loader's first reservation of the image: mapped, not yet readable.
	p.Maps = []Mapping{{Start: bias, End: bias + end, Perms: "r--p", Path: "libruby.so"}}
	if err := p.loaded(bss); !errors.Is(err, ErrVMNotReady) {
		t.Errorf("address under the loader's reservation: %v, want ErrVMNotReady", err)
	}
	p.Maps = append([]Mapping{{Start: bias + end - 0x1000, End: bias + end, Perms: "rw-p"}}, p.Maps...)
	if err := p.loaded(bss); err != nil {
		t.Errorf("mapped address: %v", err)
	}
}
