package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// ErrNotPermitted means this process may not load BPF programs or open
// perf events. It is an fs.ErrPermission too (errors.Is), as the EPERM it
// stands for was: a caller that asks only that sees it.
var ErrNotPermitted error = notPermitted{}

type notPermitted struct{}

func (notPermitted) Error() string        { return "not permitted" }
func (notPermitted) Is(target error) bool { return target == fs.ErrPermission }

// Supported tries to load a trivial perf_event program, the least rubyperf
// record needs. It returns an error wrapping ErrNotPermitted, with what to
// do, when privileges are missing.
func Supported() error {
	if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("memlock: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.PerfEvent,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("loading BPF programs is %w: run as root, or grant CAP_BPF and CAP_PERFMON "+
			"(and check sysctl kernel.unprivileged_bpf_disabled and kernel.perf_event_paranoid)", ErrNotPermitted)
	}
	if err != nil {
		return fmt.Errorf("load a trivial BPF program: %w", err)
	}
	prog.Close()
	// The program walks Ruby and native stacks in bpf_loop (Linux 5.17):
	// there is no walk without it, so no fallback.
	if err := features.HaveProgramHelper(ebpf.PerfEvent, asm.FnLoop); errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("the kernel (%s) has no bpf_loop helper, which rubyperf's BPF program walks stacks with: it needs Linux 5.17 or later", kernelRelease())
	} else if err != nil {
		return fmt.Errorf("probe the kernel for bpf_loop: %w", err)
	}
	return nil
}

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown release"
	}
	return unix.ByteSliceToString(u.Release[:])
}
