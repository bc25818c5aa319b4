package gemm

import "golang.org/x/sys/cpu"

// avx2Kernel is the AVX2/FMA micro-kernel: a 6×16 tile of C in twelve YMM
// accumulators, fed by two vectors of B and one broadcast of A per step.
var avx2Kernel = kernel{name: "avx2-fma 6x16", mr: 6, nr: 16, mc: 96, kc: 256, nc: 3072, tile: tileAVX2, tileRows: tileRowsAVX2, tileColsB: tileColsBAVX2, short: avx2Short, interleave: interleave4Vector, interleave2: interleave2Vector, copyRows: copyRowsVector}

// avx2Short are the AVX2 kernel's short tiles: its first 2 and 4 rows,
// for ragged last panels.
var avx2Short = []shortTile{
	newShortTile(6, 2, 16, kernel2x16, kernel2x16ColsB),
	newShortTile(6, 4, 16, kernel4x16, kernel4x16ColsB),
}

// avx512Kernel is the AVX-512 micro-kernel: a 12×32 tile of C in 24 ZMM
// accumulators.
var avx512Kernel = kernel{name: "avx512 12x32", mr: 12, nr: 32, mc: 96, kc: 256, nc: 3072, tile: tileAVX512, tileRows: tileRowsAVX512, tileColsB: tileColsBAVX512, short: avx512Short, interleave: interleave4Vector, interleave2: interleave2Vector, copyRows: copyRowsVector}

// avx512Short are the AVX-512 kernel's short tiles: its first 4 and 8
// rows, for ragged last panels.
var avx512Short = []shortTile{
	newShortTile(12, 4, 32, kernel4x32, kernel4x32ColsB),
	newShortTile(12, 8, 32, kernel8x32, kernel8x32ColsB),
}

// bestKernel is the micro-kernel New picks: the first of
// availableKernels.
func bestKernel() kernel { return availableKernels()[0] }

// checkTile checks, once per tile, that a kernel of mr×nr tiles can read
// what it will — mr rows of A kc long and lda elements apart (a packed
// panel: lda = kc), kc rows of B nr wide and ldb apart (a packed panel:
// ldb = nr), mr rows of C nr wide and ldc apart — so that the assembly
// after it runs unchecked. It panics with the index out of range where
// one cannot.
func checkTile(kc, mr, nr int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	_ = a[(mr-1)*lda+kc-1]
	_ = b[(kc-1)*ldb+nr-1]
	_ = c[(mr-1)*ldc+nr-1]
}

func tileAVX2(kc int, a, b, c []float32, ldc int, add bool) {
	checkTile(kc, 6, 16, a, kc, b, 16, c, ldc)
	kernel6x16(kc, &a[0], &b[0], &c[0], ldc, add)
}

// kernel6x16 adds the product of a packed 6×kc panel a and a packed kc×16
// panel b into the 6×16 tile at c (row stride ldc elements), or with add
// false stores it there without reading c. kc ≥ 1.
//
//go:noescape
func kernel6x16(kc int, a, b, c *float32, ldc int, add bool)

func tileRowsAVX2(kc int, a []float32, lda int, b, c []float32, ldc int, add bool) {
	checkTile(kc, 6, 16, a, lda, b, 16, c, ldc)
	kernel6x16Rows(kc, &a[0], lda, &b[0], &c[0], ldc, add)
}

// kernel6x16Rows is kernel6x16 reading its 6 rows of A unpacked, row i
// at a + i·lda elements.
//
//go:noescape
func kernel6x16Rows(kc int, a *float32, lda int, b, c *float32, ldc int, add bool)

func tileColsBAVX2(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {
	checkTile(kc, 6, 16, a, kc, b, ldb, c, ldc)
	kernel6x16ColsB(kc, &a[0], &b[0], ldb, &c[0], ldc, add)
}

// kernel6x16ColsB is kernel6x16 reading its kc×16 block of B unpacked,
// row l at b + l·ldb elements.
//
//go:noescape
func kernel6x16ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)

// checkShortTile is checkTile for a short kernel: the first rows of a
// packed panel of A (mr values a step of depth), kc rows of B nr wide
// and ldb apart, and rows rows of C nr wide and ldc apart.
func checkShortTile(kc, mr, rows, nr int, a, b []float32, ldb int, c []float32, ldc int) {
	_ = a[(kc-1)*mr+rows-1]
	_ = b[(kc-1)*ldb+nr-1]
	_ = c[(rows-1)*ldc+nr-1]
}

// newShortTile is the short tile of rows rows of a kernel with mr×nr
// tiles, run by the assembly kernels tile (B packed) and colsB (B
// unpacked), each call checked first by checkShortTile.
func newShortTile(mr, rows, nr int, tile func(kc int, a, b, c *float32, ldc int, add bool), colsB func(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)) shortTile {
	return shortTile{
		rows: rows,
		tile: func(kc int, a, b, c []float32, ldc int, add bool) {
			checkShortTile(kc, mr, rows, nr, a, b, nr, c, ldc)
			tile(kc, &a[0], &b[0], &c[0], ldc, add)
		},
		tileColsB: func(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {
			checkShortTile(kc, mr, rows, nr, a, b, ldb, c, ldc)
			colsB(kc, &a[0], &b[0], ldb, &c[0], ldc, add)
		},
	}
}

// kernel2x16 and kernel4x16 are kernel6x16 for the first 2 or 4 rows of
// its packed 6-row panel of A (6 values a step of depth), writing only
// those rows of C: the same sums in the same order, so the same bits.
//
//go:noescape
func kernel2x16(kc int, a, b, c *float32, ldc int, add bool)

//go:noescape
func kernel4x16(kc int, a, b, c *float32, ldc int, add bool)

// kernel2x16ColsB and kernel4x16ColsB are kernel6x16ColsB for the first
// 2 or 4 rows of its panel of A, as kernel2x16 and kernel4x16.
//
//go:noescape
func kernel2x16ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)

//go:noescape
func kernel4x16ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)

// kernel4x32 and kernel8x32 are kernel12x32 for the first 4 or 8 rows of
// its packed 12-row panel of A (12 values a step of depth), writing only
// those rows of C: the same sums in the same order, so the same bits.
//
//go:noescape
func kernel4x32(kc int, a, b, c *float32, ldc int, add bool)

//go:noescape
func kernel8x32(kc int, a, b, c *float32, ldc int, add bool)

// kernel4x32ColsB and kernel8x32ColsB are kernel12x32ColsB for the first
// 4 or 8 rows of its panel of A, as kernel4x32 and kernel8x32.
//
//go:noescape
func kernel4x32ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)

//go:noescape
func kernel8x32ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)

// availableKernels lists every micro-kernel this CPU can run, best first:
// the widest, but on CPUs that run AVX-512 in 256-bit halves
// (halfWidthAVX512) the AVX2 kernel before the AVX-512 one.
func availableKernels() []kernel {
	return kernelsFor(cpu.X86.HasAVX512F, cpu.X86.HasAVX2 && cpu.X86.HasFMA, thisProcessor())
}

// kernelsFor is availableKernels for a CPU with or without AVX-512F and
// AVX2 with FMA, and identified as p.
func kernelsFor(avx512, avx2 bool, p processor) []kernel {
	var ks []kernel
	if avx2 {
		ks = append(ks, avx2Kernel)
	}
	if avx512 {
		if halfWidthAVX512(p) {
			ks = append(ks, avx512Kernel)
		} else {
			ks = append([]kernel{avx512Kernel}, ks...)
		}
	}
	return append(ks, goKernel)
}

func tileAVX512(kc int, a, b, c []float32, ldc int, add bool) {
	checkTile(kc, 12, 32, a, kc, b, 32, c, ldc)
	kernel12x32(kc, &a[0], &b[0], &c[0], ldc, add)
}

// kernel12x32 is kernel6x16's AVX-512 counterpart for a 12×32 tile.
//
//go:noescape
func kernel12x32(kc int, a, b, c *float32, ldc int, add bool)

func tileRowsAVX512(kc int, a []float32, lda int, b, c []float32, ldc int, add bool) {
	checkTile(kc, 12, 32, a, lda, b, 32, c, ldc)
	kernel12x32Rows(kc, &a[0], lda, &b[0], &c[0], ldc, add)
}

// kernel12x32Rows is kernel12x32 reading its 12 rows of A unpacked, row
// i at a + i·lda elements.
//
//go:noescape
func kernel12x32Rows(kc int, a *float32, lda int, b, c *float32, ldc int, add bool)

func tileColsBAVX512(kc int, a, b []float32, ldb int, c []float32, ldc int, add bool) {
	checkTile(kc, 12, 32, a, kc, b, ldb, c, ldc)
	kernel12x32ColsB(kc, &a[0], &b[0], ldb, &c[0], ldc, add)
}

// kernel12x32ColsB is kernel12x32 reading its kc×32 block of B unpacked,
// row l at b + l·ldb elements.
//
//go:noescape
func kernel12x32ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
