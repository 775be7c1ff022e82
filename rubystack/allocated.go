package rubystack

import (
	"errors"
	"fmt"
)

// ErrNoAllocated says the layout does not say where the GC counts
// allocations.
var ErrNoAllocated = errors.New("the layout does not say where the GC counts allocations")

// AllocationCounter returns the address of the live process's one
// allocation counter, for a layout that keeps one in the objspace (not
// one per pool): false otherwise.
func (r *Reader) AllocationCounter() (uint64, bool) {
	a := r.Layout.Allocated
	if r.Layout.VM.ObjSpace <= 0 || a.Counter <= 0 {
		return 0, false
	}
	os, err := r.vmPointer(r.Layout.VM.ObjSpace, "vm->objspace")
	if err != nil {
		return 0, false
	}
	return os + uint64(a.Counter), true
}

// AllocatedObjects reads how many objects the live process has allocated
// since it started, as GC.stat(:total_allocated_objects) says: the
// objspace's counter, or the sum of its size pools' or heaps' (Layout.
// Allocated). It reads the process now, never from a cache.
func (r *Reader) AllocatedObjects() (uint64, error) {
	a := r.Layout.Allocated
	if r.Layout.VM.ObjSpace <= 0 || a.Counter <= 0 && (a.Pools < 0 || a.Count <= 0 || a.Stride <= 0) {
		return 0, ErrNoAllocated
	}
	os, err := r.vmPointer(r.Layout.VM.ObjSpace, "vm->objspace")
	if err != nil {
		return 0, err
	}
	if a.Counter > 0 {
		return r.direct.word(os + uint64(a.Counter))
	}
	var sum uint64
	for i := int64(0); i < a.Count; i++ {
		at := os + uint64(a.Pools+i*a.Stride+a.PoolCounter)
		n, err := r.direct.word(at)
		if err != nil {
			return 0, fmt.Errorf("allocation counter of pool %d at %#x: %w", i, at, err)
		}
		sum += n
	}
	return sum, nil
}
