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
