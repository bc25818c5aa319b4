package gemm

// interleave4Vector is interleave4 with the AVX2 kernel of pack_amd64.s;
// the assembly micro-kernels' packings use it (their CPUs have AVX2).
// Each value is the same float32 product, so both give the same bits
// (TestInterleave4Vector).
func interleave4Vector(dst []float32, width int, src []float32, base, stride, kc int, alpha float32) {
	if kc == 0 {
		return
	}
	_ = src[base+3*stride+kc-1]
	_ = dst[(kc-1)*width+3]
	interleave4AVX2(&dst[0], width, &src[base], stride, kc, alpha)
}

// interleave4AVX2 is interleave4 over four rows from src, stride elements
// apart, for kc ≥ 1 columns.
//
//go:noescape
func interleave4AVX2(dst *float32, width int, src *float32, stride, kc int, alpha float32)

// interleave2Vector is interleave2 with the AVX2 kernel of
// pack_amd64.s: the same bits (TestInterleave2Vector).
func interleave2Vector(dst []float32, width int, src []float32, base, stride, kc int, alpha float32) {
	if kc == 0 {
		return
	}
	_ = src[base+stride+kc-1]
	_ = dst[(kc-1)*width+1]
	interleave2AVX2(&dst[0], width, &src[base], stride, kc, alpha)
}

// interleave2AVX2 is interleave2 over two rows from src, stride elements
// apart, for kc ≥ 1 columns.
//
//go:noescape
func interleave2AVX2(dst *float32, width int, src *float32, stride, kc int, alpha float32)

// copyRowsVector is copyRows with the AVX2 kernel of pack_amd64.s, for
// the assembly micro-kernels' panel widths (B's 16 and 32, A's 6 and 12).
func copyRowsVector(dst, src []float32, stride, kc, width int) {
	if kc == 0 {
		return
	}
	if width != 6 && width != 12 && width != 16 && width != 32 {
		copyRows(dst, src, stride, kc, width)
		return
	}
	_ = src[(kc-1)*stride+width-1]
	_ = dst[kc*width-1]
	copyRowsAVX2(&dst[0], &src[0], stride, kc, width)
}

// copyRowsAVX2 is copyRows for kc ≥ 1 rows of 6, 12, 16 or 32 floats.
//
//go:noescape
func copyRowsAVX2(dst, src *float32, stride, kc, width int)
