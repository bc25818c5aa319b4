//go:build amd64 && !purego

package ring

import "golang.org/x/sys/cpu"

// haveF16C reports whether the float16 kernels can run: AVX2 and the
// 16-bit conversion instructions.
var haveF16C = haveAVX2 && cpu.X86.HasF16C

// The kernels of half_amd64.s: AVX2 for bfloat16, F16C for float16, for n
// a positive multiple of 8 (widen, accumulate) or 16 (narrow); the same
// bits as the loops of WidenInto, accumulateInto's sums, NarrowInto and
// narrowDivInto.
//
//go:noescape
func widenBF16(dst *float32, src *BFloat16, n int)

//go:noescape
func widenF16(dst *float32, src *Float16, n int)

//go:noescape
func accumulateBF16(dst *float32, src *BFloat16, n int)

//go:noescape
func accumulateF16(dst *float32, src *Float16, n int)

//go:noescape
func narrowBF16(dst *BFloat16, src *float32, n int)

//go:noescape
func narrowF16(dst *Float16, src *float32, n int)

// narrowDivBF16 and narrowDivF16 are narrowBF16 and narrowF16 of
// src[i] / div.
//
//go:noescape
func narrowDivBF16(dst *BFloat16, src *float32, n int, div float32)

//go:noescape
func narrowDivF16(dst *Float16, src *float32, n int, div float32)

// whole is the longest prefix of n elements the kernels take, in vectors
// of size, or 0 where they cannot run.
func whole(n, size int, can bool) int {
	if !can {
		return 0
	}
	return n &^ (size - 1)
}

// widenVector widens the longest prefix of src the kernels take into dst
// (at least as long), or adds it to dst's elements when add is set, and
// returns its length.
func widenVector[H half](dst []float32, src []H, add bool) int {
	switch s := any(src).(type) {
	case []BFloat16:
		if n := whole(len(s), 8, haveAVX2); n > 0 {
			if add {
				accumulateBF16(&dst[:n][0], &s[0], n)
			} else {
				widenBF16(&dst[:n][0], &s[0], n)
			}
			return n
		}
	case []Float16:
		if n := whole(len(s), 8, haveF16C); n > 0 {
			if add {
				accumulateF16(&dst[:n][0], &s[0], n)
			} else {
				widenF16(&dst[:n][0], &s[0], n)
			}
			return n
		}
	}
	return 0
}

// narrowVector rounds the longest prefix of src the kernels take into dst
// (at least as long), divided by div first unless div is 1, and returns
// its length.
func narrowVector[H half](dst []H, src []float32, div float32) int {
	switch d := any(dst).(type) {
	case []BFloat16:
		n := whole(len(src), 16, haveAVX2)
		switch {
		case n == 0:
		case div == 1:
			narrowBF16(&d[:n][0], &src[0], n)
		default:
			narrowDivBF16(&d[:n][0], &src[0], n, div)
		}
		return n
	case []Float16:
		n := whole(len(src), 16, haveF16C)
		switch {
		case n == 0:
		case div == 1:
			narrowF16(&d[:n][0], &src[0], n)
		default:
			narrowDivF16(&d[:n][0], &src[0], n, div)
		}
		return n
	}
	return 0
}
