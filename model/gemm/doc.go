// Package gemm multiplies float32 matrices: C = alpha·op(A)·op(B) + beta·C,
// row-major, the hot path of linear and convolution layers.
//
// The algorithm is the one BLIS and OpenBLAS use: op(B) is packed into
// panels NR columns wide and op(A) into panels MR rows high, blocked so that
// a panel of B stays in L1, a block of A in L2 and a block of B in L3, and a
// small register-blocked micro-kernel multiplies one MR×NR tile of C at a
// time. On amd64 the micro-kernel is written in assembly, chosen at run time
// (golang.org/x/sys/cpu): 12×32 on AVX-512, 6×16 on AVX2/FMA; everywhere
// else a pure-Go kernel with the same contract runs, and NewPureGo forces it
// for comparison. Where a packing would serve too few tiles to repay
// itself, the assembly kernels read that operand where it lies instead: A
// in products at most 256 columns wide, and (AVX2) B in products at most
// 128 rows high, 256 or more wide and 64 or more deep (the 1×1 and
// Winograd convolutions of ResNet-50's first two stages), giving the same
// bits. Tests run every kernel the CPU supports against a float64
// reference.
package gemm
