//go:build amd64 && !purego

package data

import "golang.org/x/sys/cpu"

// hasResizeKernels reports whether this processor runs the AVX2 kernels of
// resize_amd64.s (cpu.X86.HasAVX2 also checks that the operating system
// saves the YMM registers).
func hasResizeKernels() bool { return cpu.X86.HasAVX2 }

// verticalRows sets out[j], for j in [0, n), n a positive multiple of 8,
// to clip8(half + Σ src[i·stride + j]·coeffs[i]) over the taps ≥ 1 rows i:
// verticalPass's sums for one output row, eight bytes at a time.
//
//go:noescape
func verticalRows(out, src *byte, stride int, coeffs *int32, taps, n int)

// horizontalPixels sets out[3o:3o+3], for each of the count ≥ 1 output
// pixels o, to clip8(half + Σ row[3(lo+i)+c]·coeffs[o·ksize+i]) over its
// taps i < cnt, lo and cnt ≥ 1 being bounds[2o] and bounds[2o+1]:
// horizontalPass's sums for one row, a pixel's three channels at a time.
// It reads four bytes a tap, so the byte after each pixel's last tap,
// row[3(lo+cnt)], must be readable too.
//
//go:noescape
func horizontalPixels(out, row *byte, bounds *int, coeffs *int32, ksize, count int)
