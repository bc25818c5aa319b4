//go:build amd64 && !purego

package ring

import "golang.org/x/sys/cpu"

// haveF16C reports whether the float16 kernels can run: AVX2 and the
// 16-bit conversion instructions.
var haveF16C = haveAVX2 && cpu.X86.HasF16C

// The bfloat16 kernels of half_amd64.s (AVX2), for n a positive multiple
// of 8 (widen, accumulate) or 16 (narrow): the same bits as the loops of
// NarrowInto, WidenInto and accumulateInto's sums.
//
//go:noescape
func widenBF16(dst *float32, src *BFloat16, n int)

//go:noescape
func accumulateBF16(acc *float32, src *BFloat16, n int)

//go:noescape
func narrowBF16(dst *BFloat16, src *float32, n int)

// narrowDivBF16 is narrowBF16 of src[i] / div.
//
//go:noescape
func narrowDivBF16(dst *BFloat16, src *float32, n int, div float32)

// widenBF16Vector widens the longest prefix of src the kernel takes into
// dst (at least as long) and returns its length.
func widenBF16Vector(dst []float32, src []BFloat16) int {
	n := len(src) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	widenBF16(&dst[:n][0], &src[0], n)
	return n
}

// accumulateBF16Vector adds the longest prefix of src the kernel takes
// into acc (at least as long) and returns its length.
func accumulateBF16Vector(acc []float32, src []BFloat16) int {
	n := len(src) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	accumulateBF16(&acc[:n][0], &src[0], n)
	return n
}

// narrowBF16Vector rounds the longest prefix of src the kernel takes into
// dst (at least as long) and returns its length.
func narrowBF16Vector(dst []BFloat16, src []float32) int {
	n := len(src) &^ 15
	if !haveAVX2 || n == 0 {
		return 0
	}
	narrowBF16(&dst[:n][0], &src[0], n)
	return n
}

// narrowDivBF16Vector is narrowBF16Vector of src[i] / div.
func narrowDivBF16Vector(dst []BFloat16, src []float32, div float32) int {
	n := len(src) &^ 15
	if !haveAVX2 || n == 0 {
		return 0
	}
	narrowDivBF16(&dst[:n][0], &src[0], n, div)
	return n
}

// The float16 kernels of half_amd64.s (F16C), the same bits as the
// scalar loops, for the same multiples as bfloat16's.
//
//go:noescape
func widenF16(dst *float32, src *Float16, n int)

//go:noescape
func accumulateF16(acc *float32, src *Float16, n int)

//go:noescape
func narrowF16(dst *Float16, src *float32, n int)

//go:noescape
func narrowDivF16(dst *Float16, src *float32, n int, div float32)

func widenF16Vector(dst []float32, src []Float16) int {
	n := len(src) &^ 7
	if !haveF16C || n == 0 {
		return 0
	}
	widenF16(&dst[:n][0], &src[0], n)
	return n
}

func accumulateF16Vector(acc []float32, src []Float16) int {
	n := len(src) &^ 7
	if !haveF16C || n == 0 {
		return 0
	}
	accumulateF16(&acc[:n][0], &src[0], n)
	return n
}

func narrowF16Vector(dst []Float16, src []float32) int {
	n := len(src) &^ 15
	if !haveF16C || n == 0 {
		return 0
	}
	narrowF16(&dst[:n][0], &src[0], n)
	return n
}

func narrowDivF16Vector(dst []Float16, src []float32, div float32) int {
	n := len(src) &^ 15
	if !haveF16C || n == 0 {
		return 0
	}
	narrowDivF16(&dst[:n][0], &src[0], n, div)
	return n
}
