package perfdata

import (
	"encoding/binary"
	"fmt"
)

// le is the byte order of every perf.data this package reads or writes: the
// kernel's native order on x86_64 and arm64. A byte-swapped (big-endian)
// file is refused by the magic check.
var le = binary.LittleEndian

// decoder reads little-endian fields from b in order. The first read past
// the end sets err and makes every later read return zero, so a run of field
// reads needs one error check at the end and never indexes out of range.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = fmt.Errorf("truncated: need %d bytes at byte %d of %d", n, d.off, len(d.b))
		return false
	}
	return true
}

func (d *decoder) u8() uint8 {
	if !d.need(1) {
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := le.Uint16(d.b[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := le.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64() uint64 {
	if !d.need(8) {
		return 0
	}
	v := le.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

// bytes returns the next n bytes (aliasing b), or nil past the end.
func (d *decoder) bytes(n int) []byte {
	if !d.need(n) {
		return nil
	}
	v := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return v
}

// count reads a u64 element count and checks that count elements of size
// bytes each fit in what is left, so a caller may allocate for them.
func (d *decoder) count(size int) int {
	n := d.u64()
	if d.err != nil {
		return 0
	}
	if n > uint64(d.left()/size) {
		d.err = fmt.Errorf("count %d of %d-byte entries at byte %d exceeds the %d bytes left", n, size, d.off-8, d.left())
		return 0
	}
	return int(n)
}

// u64s reads n u64 values into the storage of into; n must have been
// bounded by count.
func (d *decoder) u64s(into []uint64, n int) []uint64 {
	if !d.need(8 * n) {
		return nil
	}
	v := grow(into, n)
	for i := range v {
		v[i] = le.Uint64(d.b[d.off+8*i:])
	}
	d.off += 8 * n
	return v
}

func (d *decoder) left() int { return len(d.b) - d.off }

// grow is s resized to n elements, in its own storage when that is large
// enough; the elements' values are left for the caller to set.
func grow[T any](s []T, n int) []T {
	if s == nil || cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// cstring returns the bytes of b up to the first NUL (all of b if none).
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// align8 rounds n up to a multiple of 8.
func align8(n int) int { return (n + 7) &^ 7 }

// appendCString appends s, a NUL and zero padding up to a multiple of 8 bytes
// (the filename and comm fields of MMAP, MMAP2 and COMM records).
func appendCString(dst []byte, s string) []byte {
	n := align8(len(s) + 1)
	dst = append(dst, s...)
	for i := len(s); i < n; i++ {
		dst = append(dst, 0)
	}
	return dst
}
