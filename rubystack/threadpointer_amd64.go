package rubystack

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func threadPointerFromRegs(tid int) (uint64, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		return 0, fmt.Errorf("thread %d: read registers: %w", tid, err)
	}
	return regs.Fs_base, nil
}
