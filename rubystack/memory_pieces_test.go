package rubystack

import (
	"bytes"
	"os"
	"testing"
	"unsafe"
)

// TestReadPieces: process_vm_readv of many pieces of this process's own
// memory, one of them unmapped between readable ones: every readable piece
// is read whole, the unmapped one alone fails, across more than one call's
// worth of pieces.
func TestReadPieces(t *testing.T) {
	m := &ProcessMemory{PID: os.Getpid()}
	defer m.Close()
	const n = maxIovecs + 300
	src := make([][]byte, n)
	p := make([][]byte, n)
	addrs := make([]uint64, n)
	ok := make([]bool, n)
	for i := range n {
		src[i] = bytes.Repeat([]byte{byte(i)}, 56)
		p[i] = make([]byte, 56)
		addrs[i] = uint64(uintptr(unsafe.Pointer(&src[i][0])))
	}
	bad := map[int]bool{7: true, maxIovecs - 1: true, maxIovecs + 5: true}
	for i := range bad {
		addrs[i] = 0x10 // never mapped
	}
	m.ReadPieces(p, addrs, ok)
	for i := range n {
		switch {
		case bad[i] && ok[i]:
			t.Errorf("piece %d at an unmapped address read", i)
		case !bad[i] && (!ok[i] || !bytes.Equal(p[i], src[i])):
			t.Errorf("piece %d: ok %v, read %v", i, ok[i], p[i][:4])
		}
	}
}
