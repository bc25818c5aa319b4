//go:build amd64 && !purego

package ring

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveAVX2 reports whether the vector kernels can run: the processor has
// AVX2 and the operating system saves the YMM registers (cpu.X86.HasAVX2
// checks both).
var haveAVX2 = cpu.X86.HasAVX2

// The kernels of reduce_amd64.s: dst[i] = a[i] op b[i] for i < n, n a
// positive multiple of 8 (float32) or 4 (float64).
//
//go:noescape
func addF32(dst, a, b *float32, n int)

//go:noescape
func mulF32(dst, a, b *float32, n int)

//go:noescape
func addF64(dst, a, b *float64, n int)

//go:noescape
func mulF64(dst, a, b *float64, n int)

// reduceVector reduces the longest prefix of dst the vector kernels take
// (sums and products of floating-point elements, whole vectors) and
// returns its length; the scalar loop does the rest. a and b are at least
// as long as dst.
func reduceVector[T Elem](op Op, dst, a, b []T) int {
	if !haveAVX2 || len(dst) == 0 {
		return 0
	}
	p := func(s []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }
	switch dt, n := DTypeOf[T](), len(dst); {
	case dt == Float32 && n >= 8 && (op == Sum || op == Avg):
		n &^= 7
		addF32((*float32)(p(dst)), (*float32)(p(a)), (*float32)(p(b)), n)
		return n
	case dt == Float32 && n >= 8 && op == Prod:
		n &^= 7
		mulF32((*float32)(p(dst)), (*float32)(p(a)), (*float32)(p(b)), n)
		return n
	case dt == Float64 && n >= 4 && (op == Sum || op == Avg):
		n &^= 3
		addF64((*float64)(p(dst)), (*float64)(p(a)), (*float64)(p(b)), n)
		return n
	case dt == Float64 && n >= 4 && op == Prod:
		n &^= 3
		mulF64((*float64)(p(dst)), (*float64)(p(a)), (*float64)(p(b)), n)
		return n
	}
	return 0
}
