package gemm

// goKernel is the portable micro-kernel: a 4×8 tile held in 32 scalar
// accumulators, which the Go compiler keeps in registers well enough.
var goKernel = kernel{name: "go 4x8", mr: 4, nr: 8, mc: 128, kc: 256, nc: 2048, tile: tileGo4x8, interleave: interleave4, interleave2: interleave2, copyRows: copyRows}

func tileGo4x8(kc int, a, b, c []float32, ldc int, add bool) {
	var c00, c01, c02, c03, c04, c05, c06, c07 float32
	var c10, c11, c12, c13, c14, c15, c16, c17 float32
	var c20, c21, c22, c23, c24, c25, c26, c27 float32
	var c30, c31, c32, c33, c34, c35, c36, c37 float32
	a = a[:4*kc]
	b = b[:8*kc]
	for l := 0; l < kc; l++ {
		av := a[4*l : 4*l+4 : 4*l+4]
		bv := b[8*l : 8*l+8 : 8*l+8]
		b0, b1, b2, b3, b4, b5, b6, b7 := bv[0], bv[1], bv[2], bv[3], bv[4], bv[5], bv[6], bv[7]
		a0 := av[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c04 += a0 * b4
		c05 += a0 * b5
		c06 += a0 * b6
		c07 += a0 * b7
		a1 := av[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c14 += a1 * b4
		c15 += a1 * b5
		c16 += a1 * b6
		c17 += a1 * b7
		a2 := av[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c24 += a2 * b4
		c25 += a2 * b5
		c26 += a2 * b6
		c27 += a2 * b7
		a3 := av[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		c34 += a3 * b4
		c35 += a3 * b5
		c36 += a3 * b6
		c37 += a3 * b7
	}
	putRow8(c[0*ldc:0*ldc+8], add, c00, c01, c02, c03, c04, c05, c06, c07)
	putRow8(c[1*ldc:1*ldc+8], add, c10, c11, c12, c13, c14, c15, c16, c17)
	putRow8(c[2*ldc:2*ldc+8], add, c20, c21, c22, c23, c24, c25, c26, c27)
	putRow8(c[3*ldc:3*ldc+8], add, c30, c31, c32, c33, c34, c35, c36, c37)
}

// putRow8 adds v0…v7 into r, or with add false stores them there.
func putRow8(r []float32, add bool, v0, v1, v2, v3, v4, v5, v6, v7 float32) {
	r = r[:8]
	if !add {
		r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] = v0, v1, v2, v3, v4, v5, v6, v7
		return
	}
	r[0] += v0
	r[1] += v1
	r[2] += v2
	r[3] += v3
	r[4] += v4
	r[5] += v5
	r[6] += v6
	r[7] += v7
}
