package gemm

import "golang.org/x/sys/cpu"

// avx2Kernel is the AVX2/FMA micro-kernel: a 6×16 tile of C in twelve YMM
// accumulators, fed by two vectors of B and one broadcast of A per step.
var avx2Kernel = kernel{name: "avx2-fma 6x16", mr: 6, nr: 16, mc: 96, kc: 256, nc: 3072, tile: tileAVX2}

func bestKernel() kernel {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		return avx2Kernel
	}
	return goKernel
}

func tileAVX2(kc int, a, b, c []float32, ldc int) {
	// Bounds checks once per tile; the assembly then runs unchecked.
	_ = a[6*kc-1]
	_ = b[16*kc-1]
	_ = c[5*ldc+15]
	kernel6x16(kc, &a[0], &b[0], &c[0], ldc)
}

// kernel6x16 adds the product of a packed 6×kc panel a and a packed kc×16
// panel b into the 6×16 tile at c (row stride ldc elements). kc ≥ 1.
//
//go:noescape
func kernel6x16(kc int, a, b, c *float32, ldc int)
