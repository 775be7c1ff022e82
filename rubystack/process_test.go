package rubystack

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rubyperf/rubyperf/internal/testruby"
	"github.com/rubyperf/rubyperf/internal/testskip"
	"github.com/rubyperf/rubyperf/rubybuild"
)

// TestDeletedBinary: a Ruby whose executable was deleted after it started
// (an upgrade under a running server) is still found, through
// /proc/PID/map_files, and snapshots.
func TestDeletedBinary(t *testing.T) {
	src := testruby.Get(t, "source-3.3-static-stripped")
	dir := t.TempDir()
	exe := filepath.Join(dir, "ruby")
	testruby.CopyFile(t, src.Exe, exe)
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	src.Exe = exe
	cmd := testruby.Start(t, src, "-e", `def parked = (STDOUT.puts("ready"); STDOUT.flush; sleep); parked`)
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
	testskip.Privileged(t, err)
	defer p.Close()
	if p.MappedPath != exe || !strings.Contains(p.Binary.File(), "map_files") {
		t.Errorf("mapped %q opened through %q", p.MappedPath, p.Binary.File())
	}
	stacks := parkedSnapshot(t, cmd.Process.Pid)
	if len(stacks) != 1 || len(stacks[0].Frames) < 2 || stacks[0].Frames[1].Label != "Object#parked" {
		t.Errorf("stacks %+v", stacks)
	}
}

// TestProcMemFallback: /proc/PID/mem returns the same bytes as
// process_vm_readv.
func TestProcMemFallback(t *testing.T) {
	cmd := testruby.Start(t, testruby.Get(t, "debian-3.1"), "-e", `STDOUT.puts "ready"; STDOUT.flush; sleep`)
	p, err := OpenProcess(cmd.Process.Pid, rubybuild.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := &ProcessMemory{PID: p.PID}
	defer m.Close()
	start, _ := p.Binary.Image()
	addr := p.Bias + start
	a, b := make([]byte, 4096), make([]byte, 4096)
	err = m.ReadAt(a, addr)
	testskip.Privileged(t, err)
	if err := m.readProcMem(b, addr); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || !bytes.HasPrefix(a, []byte("\x7fELF")) {
		t.Errorf("process_vm_readv and /proc/PID/mem disagree, or no ELF header at the load address")
	}
}
