package threadlocal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testskip"
)

// muslProbes are the probes musl can dlopen: it refuses an initial-exec
// variable in an object loaded after start.
var muslProbes = probes[:2]

// TestFindMusl: the test programs built against musl (musl-gcc). Find
// locates each dlopen'ed variable through musl's DTV, and its address is
// the one each setter thread printed; musl gives every running thread a
// block at dlopen, so the idle threads have one too, still zero.
func TestFindMusl(t *testing.T) {
	testskip.Command(t, "musl-gcc", "musl-tools")
	h := startHostOf(t, buildWith(t, "musl-gcc", muslProbes), muslProbes)
	mem := procMem{h.pid}
	threadPointer(t, h.pid, h.pid) // ptrace needed: skip early without it
	dtv, err := DTVOf(h.pid, mem)
	if err != nil || dtv.Libc != "musl" || dtv.EntrySize != muslDTVEntry {
		t.Fatalf("DTVOf = %+v, %v; want musl's", dtv, err)
	}
	for _, p := range muslProbes {
		if _, err := Find(h.pid, mem, p.symbol); !errors.Is(err, ErrNotLoaded) {
			t.Fatalf("%s before dlopen: %v, want ErrNotLoaded", p.symbol, err)
		}
	}
	h.load(t)
	var ids []uint64
	for i, p := range muslProbes {
		v, err := Find(h.pid, mem, p.symbol)
		if err != nil {
			t.Fatalf("%s: %v", p.symbol, err)
		}
		t.Logf("%s: %+v", p.symbol, *v)
		ids = append(ids, v.ModID)
		if filepath.Base(v.Object) != p.lib || v.Static {
			t.Errorf("%s: Object %s Static %v, want .../%s through the DTV", p.symbol, v.Object, v.Static, p.lib)
		}
		h.checkSetters(t, mem, v, i, p)
		for _, tid := range h.idle {
			addr, ok, err := v.Address(mem, threadPointer(t, h.pid, tid))
			if err != nil || !ok {
				t.Errorf("%s idle thread %d: no block (%v), but musl gives every thread one", p.symbol, tid, err)
				continue
			}
			if got, err := word(mem, addr); err != nil || got != 0 {
				t.Errorf("%s idle thread %d: %#x holds %#x (%v), want 0", p.symbol, tid, addr, got, err)
			}
		}
	}
	// The host has no TLS of its own: the probes are modules 1 and 2, in
	// the order it loaded them.
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
		t.Errorf("module ids %v, want [1 2]", ids)
	}
}

// TestDTVOf: glibc's DTV in the glibc-built host (read from its
// descriptors), and an error naming the cause in a static program, which
// maps no C library at all.
func TestDTVOf(t *testing.T) {
	h := startHost(t, build(t))
	dtv, err := DTVOf(h.pid, procMem{h.pid})
	if err != nil || dtv != glibcDTV {
		t.Errorf("glibc host: DTVOf = %+v, %v; want %+v", dtv, err, glibcDTV)
	}
	// Through a Files: the same answer, twice, the files it read kept.
	var files Files
	for i := 0; i < 2; i++ {
		if got, err := files.DTVOf(h.pid, procMem{h.pid}); err != nil || got != dtv {
			t.Errorf("Files.DTVOf, call %d: %+v, %v; want %+v", i+1, got, err, dtv)
		}
	}
	if len(files.infos) == 0 {
		t.Errorf("Files.DTVOf kept no file")
	}
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "static.c"), filepath.Join(dir, "static")
	if err := os.WriteFile(src, []byte("#include <unistd.h>\nint main(void) { pause(); return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-static", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc -static: %v: %s", err, out)
	}
	cmd := exec.Command(exe)
	if err := cmd.Start(); err != nil { // returns once exec succeeded: its maps are the program's
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := DTVOf(cmd.Process.Pid, procMem{cmd.Process.Pid}); err == nil || !strings.Contains(err.Error(), "neither glibc nor musl") {
		t.Errorf("static program: DTVOf error %v, want one saying neither glibc nor musl", err)
	}
}
