package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

// MaxArgs is the most arguments a kernel launch may take.
const MaxArgs = 24

// Args packs a kernel's arguments the way cuLaunchKernel reads them: an
// array of pointers, each to one argument's value. Each argument gets an
// 8-byte slot (pointers and 64-bit values fill it; 32-bit values use its
// first 4 bytes, as the little-endian GPU reads them). An Args is reused
// from launch to launch so packing allocates nothing; it must not move
// while a launch reads it, which holds for heap memory in Go.
type Args struct {
	vals [MaxArgs]uint64
	ptrs [MaxArgs]unsafe.Pointer
	n    int
	err  error
}

// NewArgs returns an empty argument list on the heap.
func NewArgs() *Args {
	a := new(Args)
	for i := range a.ptrs {
		a.ptrs[i] = unsafe.Pointer(&a.vals[i])
	}
	return a
}

// Reset empties the list.
func (a *Args) Reset() *Args { a.n, a.err = 0, nil; return a }

func (a *Args) put(v uint64) *Args {
	if a.n == MaxArgs {
		a.err = fmt.Errorf("cuda: more than %d kernel arguments", MaxArgs)
		return a
	}
	a.vals[a.n] = v
	a.n++
	return a
}

// Ptr appends a device pointer.
func (a *Args) Ptr(p DevPtr) *Args { return a.put(uint64(p)) }

// Int appends a 32-bit int (the kernel's parameter is int).
func (a *Args) Int(v int) *Args { return a.put(uint64(uint32(int32(v)))) }

// Int64 appends a 64-bit integer (long long).
func (a *Args) Int64(v int64) *Args { return a.put(uint64(v)) }

// Float appends a float.
func (a *Args) Float(v float32) *Args { return a.put(uint64(math.Float32bits(v))) }

// Len is the number of arguments.
func (a *Args) Len() int { return a.n }

// Word returns the 8-byte slot of argument i, as the kernel would read it.
func (a *Args) Word(i int) uint64 { return *(*uint64)(a.ptrs[i]) }

// Err reports an overflowing list.
func (a *Args) Err() error { return a.err }

// params is the kernelParams pointer array.
func (a *Args) params() unsafe.Pointer { return unsafe.Pointer(&a.ptrs[0]) }

// Float64 appends a double.
func (a *Args) Float64(v float64) *Args { return a.put(math.Float64bits(v)) }
