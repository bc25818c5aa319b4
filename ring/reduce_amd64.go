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
	if !haveAVX2 || (op != Sum && op != Avg && op != Prod) {
		return 0
	}
	switch DTypeOf[T]() {
	case Float32:
		d, x, y := as[float32](dst), as[float32](a), as[float32](b)
		n := len(d) &^ 7 // whole vectors of eight
		switch {
		case n == 0:
		case op == Prod:
			mulF32(&d[0], &x[0], &y[0], n)
		default:
			addF32(&d[0], &x[0], &y[0], n)
		}
		return n
	case Float64:
		d, x, y := as[float64](dst), as[float64](a), as[float64](b)
		n := len(d) &^ 3 // whole vectors of four
		switch {
		case n == 0:
		case op == Prod:
			mulF64(&d[0], &x[0], &y[0], n)
		default:
			addF64(&d[0], &x[0], &y[0], n)
		}
		return n
	}
	return 0
}

// as views s, whose elements are already E, as a []E.
func as[E Elem, T Elem](s []T) []E {
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}
