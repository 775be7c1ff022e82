package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
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
	return prog.Close()
}
