package cpu

import "math"

// vecOps are the element-wise loops that run often enough to pay for
// vector kernels: the Winograd transforms' seven operations (winograd.go)
// on rows of tiles (n consecutive tiles' values of one tile element) or
// on rows of an image, F(4×4, 3×3)'s three (winograd4.go) and the 8×8
// channel transposes around the channels-innermost transforms
// (winolast.go), batch norm's two per-element passes and two sums
// (norm.go), the relu and its gradient, the 2×2 max pool and its gradient
// (pool.go), the strided convolutions' image layouts (phased.go: the
// deinterleave and interleave the Winograd transforms also use, and
// gather2), the SGD (with momentum), Adam and Adadelta steps (optim.go),
// and dropout (its random numbers need 64-bit multiplies: AVX-512 has
// them, the AVX2 kernel makes each of three 32-bit ones). It runs them
// with the AVX2 kernels of vecops_amd64.s where the processor has them
// (vector true), else with the loops below; both give
// the same bits (TestVecOps): the loops round every product to float32
// (explicit conversions), so that no compiler fuses a multiply and an add
// the kernels do apart. The operations over several rows take each row's
// start as a stride in elements: rows of a plane, or every other row.
type vecOps struct {
	vector bool
	wide   bool // AVX-512 kernels (F and DQ) where the loop has one: dropout
}

// name says which kernels run: "avx2+avx512", "avx2" or "go loops".
func (o vecOps) name() string {
	switch {
	case o.vector && o.wide:
		return "avx2+avx512"
	case o.vector:
		return "avx2"
	}
	return "go loops"
}

// bt4 applies Bᵀ to four rows: y0 = x0 − x2, y1 = x1 + x2, y2 = x2 − x1,
// y3 = x1 − x3, over len(y0) elements.
func (o vecOps) bt4(y0, y1, y2, y3, x0, x1, x2, x3 []float32) {
	n := len(y0)
	y1, y2, y3, x0, x1, x2, x3 = y1[:n], y2[:n], y3[:n], x0[:n], x1[:n], x2[:n], x3[:n]
	if n == 0 {
		return
	}
	if o.vector {
		bt4Vector(&y0[0], &y1[0], &y2[0], &y3[0], &x0[0], &x1[0], &x2[0], &x3[0], n)
		return
	}
	for i := range y0 {
		a, b, c, d := x0[i], x1[i], x2[i], x3[i]
		y0[i], y1[i], y2[i], y3[i] = a-c, b+c, c-b, b-d
	}
}

// at2 applies Aᵀ to four rows: y0 = (x0 + x1) + x2, y1 = (x1 − x2) − x3.
func (o vecOps) at2(y0, y1, x0, x1, x2, x3 []float32) {
	n := len(y0)
	y1, x0, x1, x2, x3 = y1[:n], x0[:n], x1[:n], x2[:n], x3[:n]
	if n == 0 {
		return
	}
	if o.vector {
		at2Vector(&y0[0], &y1[0], &x0[0], &x1[0], &x2[0], &x3[0], n)
		return
	}
	for i := range y0 {
		a, b, c, d := x0[i], x1[i], x2[i], x3[i]
		y0[i], y1[i] = a+b+c, b-c-d
	}
}

// a4 applies A to two rows: y0 = x0, y1 = x0 + x1, y2 = x0 − x1, y3 = −x1.
func (o vecOps) a4(y0, y1, y2, y3, x0, x1 []float32) {
	n := len(y0)
	y1, y2, y3, x0, x1 = y1[:n], y2[:n], y3[:n], x0[:n], x1[:n]
	if n == 0 {
		return
	}
	if o.vector {
		a4Vector(&y0[0], &y1[0], &y2[0], &y3[0], &x0[0], &x1[0], n)
		return
	}
	for i := range y0 {
		a, b := x0[i], x1[i]
		y0[i], y1[i], y2[i], y3[i] = a, a+b, a-b, -b
	}
}

// g4 applies G to three rows: y0 = x0, y1 = 0.5·((x0 + x1) + x2),
// y2 = 0.5·((x0 − x1) + x2), y3 = x2 (the weight transform's step).
func (o vecOps) g4(y0, y1, y2, y3, x0, x1, x2 []float32) {
	n := len(y0)
	y1, y2, y3, x0, x1, x2 = y1[:n], y2[:n], y3[:n], x0[:n], x1[:n], x2[:n]
	if n == 0 {
		return
	}
	if o.vector {
		g4Vector(&y0[0], &y1[0], &y2[0], &y3[0], &x0[0], &x1[0], &x2[0], n)
		return
	}
	for i := range y0 {
		a, b, c := x0[i], x1[i], x2[i]
		y0[i], y1[i], y2[i], y3[i] = a, 0.5*(a+b+c), 0.5*(a-b+c), c
	}
}

// sixRows returns the six rows v[k·s:][:n], k < 6, of the F(4×4, 3×3)
// transforms' Go loops.
func sixRows(v []float32, s, n int) (r0, r1, r2, r3, r4, r5 []float32) {
	return v[:n], v[s:][:n], v[2*s:][:n], v[3*s:][:n], v[4*s:][:n], v[5*s:][:n]
}

// bt6 applies F(4×4, 3×3)'s Bᵀ to six rows x[k·xs:][:n], k < 6, into
// y[k·ys:][:n]: with a = x4 − 4x2, b = x3 − 4x1, c = x4 − x2 and
// e = 2(x3 − x1), y0 = (4x0 − 5x2) + x4, y1 = a + b, y2 = a − b,
// y3 = c + e, y4 = c − e, y5 = (4x1 − 5x3) + x5.
func (o vecOps) bt6(y []float32, ys int, x []float32, xs, n int) {
	if n == 0 {
		return
	}
	_, _ = y[5*ys:][:n], x[5*xs:][:n]
	if o.vector {
		bt6Vector(&y[0], ys, &x[0], xs, n)
		return
	}
	x0, x1, x2, x3, x4, x5 := sixRows(x, xs, n)
	y0, y1, y2, y3, y4, y5 := sixRows(y, ys, n)
	for i := range y0 {
		d0, d1, d2, d3, d4, d5 := x0[i], x1[i], x2[i], x3[i], x4[i], x5[i]
		a, b := d4-float32(4*d2), d3-float32(4*d1)
		c, e := d4-d2, float32(2*(d3-d1))
		y0[i] = float32(4*d0) - float32(5*d2) + d4
		y1[i], y2[i], y3[i], y4[i] = a+b, a-b, c+e, c-e
		y5[i] = float32(4*d1) - float32(5*d3) + d5
	}
}

// at4 applies F(4×4, 3×3)'s Aᵀ to six rows x[k·xs:][:n], k < 6, into
// four, y[k·ys:][:n]: with s = x1 + x2, d = x1 − x2, S = x3 + x4 and
// D = x3 − x4, y0 = (x0 + s) + S, y1 = d + 2D, y2 = s + 4S,
// y3 = (d + 8D) + x5.
func (o vecOps) at4(y []float32, ys int, x []float32, xs, n int) {
	if n == 0 {
		return
	}
	_, _ = y[3*ys:][:n], x[5*xs:][:n]
	if o.vector {
		at4Vector(&y[0], ys, &x[0], xs, n)
		return
	}
	x0, x1, x2, x3, x4, x5 := sixRows(x, xs, n)
	y0, y1, y2, y3 := y[:n], y[ys:][:n], y[2*ys:][:n], y[3*ys:][:n]
	for i := range y0 {
		s, d := x1[i]+x2[i], x1[i]-x2[i]
		bigS, bigD := x3[i]+x4[i], x3[i]-x4[i]
		y0[i] = x0[i] + s + bigS
		y1[i] = d + float32(2*bigD)
		y2[i] = s + float32(4*bigS)
		y3[i] = d + float32(8*bigD) + x5[i]
	}
}

// g6 applies F(4×4, 3×3)'s G to three rows x[k·xs:][:n], k < 3, into
// six, y[k·ys:][:n]: with a = x0/4 + x2, b = x1/2 and s = x0 + x2,
// y0 = x0/4, y1 = (s + x1)·(−1/6), y2 = (s − x1)·(−1/6), y3 = (a + b)/6,
// y4 = (a − b)/6 (both as products by 1/6 rounded to float32), y5 = x2.
func (o vecOps) g6(y []float32, ys int, x []float32, xs, n int) {
	if n == 0 {
		return
	}
	_, _ = y[5*ys:][:n], x[2*xs:][:n]
	if o.vector {
		g6Vector(&y[0], ys, &x[0], xs, n)
		return
	}
	x0, x1, x2 := x[:n], x[xs:][:n], x[2*xs:][:n]
	y0, y1, y2, y3, y4, y5 := sixRows(y, ys, n)
	const sixth = float32(1.0 / 6)
	for i := range y0 {
		g0, g1, g2 := x0[i], x1[i], x2[i]
		q := float32(0.25 * g0)
		a, b, s := q+g2, float32(0.5*g1), g0+g2
		y0[i] = q
		y1[i] = float32((s + g1) * -sixth)
		y2[i] = float32((s - g1) * -sixth)
		y3[i] = float32((a + b) * sixth)
		y4[i] = float32((a - b) * sixth)
		y5[i] = g2
	}
}

// transposeBlocks transposes blocks 8×8 blocks: row r of block b,
// src[b·srcStep + r·srcRow:][:8], becomes column r of the block's rows
// in dst, dst[b·dstStep + k·dstRow:][:8] (element k of each source row
// in row k), plus bias[k] when bias is not nil (8 values).
func (o vecOps) transposeBlocks(dst []float32, dstRow, dstStep int, src []float32, srcRow, srcStep, blocks int, bias []float32) {
	if blocks == 0 {
		return
	}
	_, _ = dst[(blocks-1)*dstStep+7*dstRow:][:8], src[(blocks-1)*srcStep+7*srcRow:][:8]
	if bias != nil {
		bias = bias[:8]
	}
	if o.vector {
		if bias != nil {
			transposeBlocksBiasVector(&dst[0], dstRow, dstStep, &src[0], srcRow, srcStep, blocks, &bias[0])
		} else {
			transposeBlocksVector(&dst[0], dstRow, dstStep, &src[0], srcRow, srcStep, blocks)
		}
		return
	}
	for b := range blocks {
		for k := range 8 {
			d := dst[b*dstStep+k*dstRow:][:8]
			for r := range 8 {
				v := src[b*srcStep+r*srcRow+k]
				if bias != nil {
					v += bias[k]
				}
				d[r] = v
			}
		}
	}
}

// rowsLen is how long a slice of rows rows of n elements, stride apart,
// is at least.
func rowsLen(rows, stride, n int) int { return (rows-1)*stride + n }

// hbt4 applies B along rows of an image: for each of rows rows, x[r·xs:]
// with 2n + 2 elements, and j < n, it is bt4 of x[2j], x[2j+1], x[2j+2],
// x[2j+3] (a tile's four columns) into y0 … y3 [r·ys + j].
func (o vecOps) hbt4(y0, y1, y2, y3 []float32, ys int, x []float32, xs, n, rows int) {
	if n == 0 || rows == 0 {
		return
	}
	l := rowsLen(rows, ys, n)
	y0, y1, y2, y3, x = y0[:l], y1[:l], y2[:l], y3[:l], x[:rowsLen(rows, xs, 2*n+2)]
	if o.vector {
		hbt4Vector(&y0[0], &y1[0], &y2[0], &y3[0], ys, &x[0], xs, n, rows)
		return
	}
	for r := range rows {
		xr := x[r*xs : r*xs+2*n+2]
		y0r, y1r, y2r, y3r := y0[r*ys:r*ys+n], y1[r*ys:r*ys+n], y2[r*ys:r*ys+n], y3[r*ys:r*ys+n]
		for j := range y0r {
			a, b, c, d := xr[2*j], xr[2*j+1], xr[2*j+2], xr[2*j+3]
			y0r[j], y1r[j], y2r[j], y3r[j] = a-c, b+c, c-b, b-d
		}
	}
}

// deinterleave sets e[r·es + j] = x[r·xs + 2j] and o[r·es + j] =
// x[r·xs + 2j + 1] for rows rows and j < n.
func (o vecOps) deinterleave(e, od []float32, es int, x []float32, xs, n, rows int) {
	if n == 0 || rows == 0 {
		return
	}
	l := rowsLen(rows, es, n)
	e, od, x = e[:l], od[:l], x[:rowsLen(rows, xs, 2*n)]
	if o.vector {
		deinterleaveVector(&e[0], &od[0], es, &x[0], xs, n, rows)
		return
	}
	for r := range rows {
		xr, er, or := x[r*xs:r*xs+2*n], e[r*es:r*es+n], od[r*es:r*es+n]
		for j := range er {
			er[j], or[j] = xr[2*j], xr[2*j+1]
		}
	}
}

// interleave sets y[r·ys + 2j] = e[r·es + j] + b and y[r·ys + 2j + 1] =
// o[r·es + j] + b for rows rows and j < n.
func (o vecOps) interleave(y []float32, ys int, e, od []float32, es int, b float32, n, rows int) {
	if n == 0 || rows == 0 {
		return
	}
	l := rowsLen(rows, es, n)
	e, od, y = e[:l], od[:l], y[:rowsLen(rows, ys, 2*n)]
	if o.vector {
		interleaveVector(&y[0], ys, &e[0], &od[0], es, b, n, rows)
		return
	}
	for r := range rows {
		yr, er, or := y[r*ys:r*ys+2*n], e[r*es:r*es+n], od[r*es:r*es+n]
		for j := range er {
			yr[2*j], yr[2*j+1] = er[j]+b, or[j]+b
		}
	}
}

// minVectorRow is the shortest row affine and affineReLU hand to their
// vector kernels: shorter ones (the outputs of a convolution over 2×2 and
// 1×1 maps, a row per channel and image) cost more in the call than in
// the loop, which gives the same bits.
const minVectorRow = 8

// affine sets y[i] = x[i]·scale + shift over len(y) elements (batch
// norm's normalisation with its scale and shift folded).
func (o vecOps) affine(y, x []float32, scale, shift float32) {
	n := len(y)
	x = x[:n]
	if n == 0 {
		return
	}
	if o.vector && n >= minVectorRow {
		affineVector(&y[0], &x[0], scale, shift, n)
		return
	}
	for i, v := range x {
		y[i] = float32(v*scale) + shift
	}
}

// affineRows sets y[f·hw + j] = x[f·hw + j]·scales[f] + shifts[f], relu'd
// with relu set, for every row f of hw < minVectorRow values (batch norm
// over 2×2 and 1×1 maps): affine's and affineReLU's loops in one loop over
// the rows, where a call a row cost more than the row (the same bits).
func affineRows(y, x []float32, hw int, scales, shifts []float32, relu bool) {
	n := hw * len(scales)
	x, y, shifts = x[:n], y[:n], shifts[:len(scales)]
	if hw == 1 {
		for f, scale := range scales {
			z := float32(x[f]*scale) + shifts[f]
			if relu {
				z = reluOf(z)
			}
			y[f] = z
		}
		return
	}
	for f, scale := range scales {
		yr := y[f*hw : f*hw+hw]
		for j, v := range x[f*hw : f*hw+hw] {
			z := float32(v*scale) + shifts[f]
			if relu {
				z = reluOf(z)
			}
			yr[j] = z
		}
	}
}

// bnGrad sets out[i] = (a·g[i] + bx·(x[i] − mu)) + d over len(out)
// elements (batch norm's input gradient).
func (o vecOps) bnGrad(out, g, x []float32, a, bx, mu, d float32) {
	n := len(out)
	g, x = g[:n], x[:n]
	if n == 0 {
		return
	}
	if o.vector {
		bnGradVector(&out[0], &g[0], &x[0], a, bx, mu, d, n)
		return
	}
	for i, v := range x {
		out[i] = float32(a*g[i]) + float32(bx*(v-mu)) + d
	}
}

// moments returns Σ(v[i] − k) and Σ(v[i] − k)² in float64 (batch norm's
// statistics over one plane). Both forms add in the same order, so they
// give the same bits: eight partial sums, element i into sum i mod 8
// over whole groups of eight, a last group of four into sums 0–3, what is
// left into a ninth sum; then ((s0 + s4) + (s2 + s6)) + ((s1 + s5) +
// (s3 + s7)), plus the ninth.
func (o vecOps) moments(v []float32, k float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	if o.vector {
		return momentsVector(&v[0], len(v), k)
	}
	var l laneSums
	for i, x := range v {
		d := float64(x) - k
		l.add(i, len(v), d, float64(d*d))
	}
	return l.totals()
}

// gradSums returns Σg[i] and Σg[i]·(x[i] − mean) in float64 over len(x)
// elements (batch norm's gradient sums over one plane), added in
// moments' order.
func (o vecOps) gradSums(x, g []float32, mean float64) (float64, float64) {
	n := len(x)
	g = g[:n]
	if n == 0 {
		return 0, 0
	}
	if o.vector {
		return gradSumsVector(&x[0], &g[0], n, mean)
	}
	return gradSumsLoop(x, g, mean, false, 0, 0)
}

// gradSumsReLU is gradSums for a batch norm with the relu after it fused
// in: g is the relu's output gradient, counted where the relu lets it
// through (reluGate).
func (o vecOps) gradSumsReLU(x, g []float32, mean float64, scale, shift float32) (float64, float64) {
	n := len(x)
	g = g[:n]
	if n == 0 {
		return 0, 0
	}
	if o.vector {
		return gradSumsReLUVector(&x[0], &g[0], n, mean, scale, shift)
	}
	return gradSumsLoop(x, g, mean, true, scale, shift)
}

// gradSumsLoop is gradSums' and gradSumsReLU's loop; with relu set the
// gradient is reluGate's.
func gradSumsLoop(x, g []float32, mean float64, relu bool, scale, shift float32) (float64, float64) {
	var l laneSums
	for i, v := range x {
		gi := g[i]
		if relu {
			gi = reluGate(gi, v, scale, shift)
		}
		gd := float64(gi)
		l.add(i, len(x), gd, float64(gd*(float64(v)-mean)))
	}
	return l.totals()
}

// laneSums is two float64 sums kept as the vector kernels keep them (see
// moments): element i of n goes into partial sum i mod 8 while it is in a
// whole group of eight or a last group of four, else into a ninth.
type laneSums struct {
	a, b   [8]float64
	ta, tb float64
}

// add adds element i's two terms.
func (l *laneSums) add(i, n int, a, b float64) {
	if j := i & 7; i < n&^7 || (i < n&^3 && j < 4) {
		l.a[j] += a
		l.b[j] += b
		return
	}
	l.ta += a
	l.tb += b
}

// totals combines the partial sums in lanes8's order, then the ninth.
func (l *laneSums) totals() (float64, float64) {
	return lanes8(&l.a) + l.ta, lanes8(&l.b) + l.tb
}

// lanes8 adds eight partial sums in the order the vector kernels do: the
// two halves lane by lane, then the 128-bit halves, then the two lanes.
func lanes8(s *[8]float64) float64 {
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))
}

// affineReLU sets y[i] = reluOf(x[i]·scale + shift) over len(y)
// elements: affine with the relu after it, in one pass.
func (o vecOps) affineReLU(y, x []float32, scale, shift float32) {
	n := len(y)
	x = x[:n]
	if n == 0 {
		return
	}
	if o.vector && n >= minVectorRow {
		affineReLUVector(&y[0], &x[0], scale, shift, n)
		return
	}
	for i, v := range x {
		y[i] = reluOf(float32(v*scale) + shift)
	}
}

// bnGradReLU is bnGrad with g the gradient of the relu after the batch
// norm, counted where the relu lets it through (reluGate).
func (o vecOps) bnGradReLU(out, g, x []float32, a, bx, mu, d, scale, shift float32) {
	n := len(out)
	g, x = g[:n], x[:n]
	if n == 0 {
		return
	}
	if o.vector {
		bnGradReLUVector(&out[0], &g[0], &x[0], a, bx, mu, d, scale, shift, n)
		return
	}
	for i, v := range x {
		gi := reluGate(g[i], v, scale, shift)
		out[i] = float32(a*gi) + float32(bx*(v-mu)) + d
	}
}

// add sets y[i] = a[i] + b[i] over len(y) elements (the gradients
// meeting where a residual block's paths split, among others).
func (o vecOps) add(y, a, b []float32) {
	n := len(y)
	a, b = a[:n], b[:n]
	if n == 0 {
		return
	}
	if o.vector {
		addVector(&y[0], &a[0], &b[0], n)
		return
	}
	for i, v := range a {
		y[i] = v + b[i]
	}
}

// addReLU sets y[i] = reluOf(a[i] + b[i]) over len(y) elements (a
// residual block's sum and relu).
func (o vecOps) addReLU(y, a, b []float32) {
	n := len(y)
	a, b = a[:n], b[:n]
	if n == 0 {
		return
	}
	if o.vector {
		addReLUVector(&y[0], &a[0], &b[0], n)
		return
	}
	for i, v := range a {
		y[i] = reluOf(v + b[i])
	}
}

// reluOf is the relu of z as the fused kernels compute it: z where z > 0
// or z is NaN (its bits kept), else +0 (as max(z, 0), except that a NaN
// keeps its sign and payload).
func reluOf(z float32) float32 {
	keep := -(b2u(z > 0) | b2u(z != z)) // without a branch: signs of random data mispredict
	return math.Float32frombits(math.Float32bits(z) & keep)
}

// reluGate is g where the relu of the batch norm's output z = x·scale +
// shift lets the gradient through — z > 0, or NaN, as PyTorch's
// threshold_backward decides — else +0.
func reluGate(g, x, scale, shift float32) float32 {
	if z := float32(x*scale) + shift; z > 0 || z != z {
		return g
	}
	return 0
}

// relu sets y[i] = reluOf(x[i]) over len(y) elements.
func (o vecOps) relu(y, x []float32) {
	n := len(y)
	x = x[:n]
	if n == 0 {
		return
	}
	if o.vector {
		reluVector(&y[0], &x[0], n)
		return
	}
	for i, v := range x {
		y[i] = reluOf(v)
	}
}

// reluBackward sets dx[i] = dy[i] where the relu's output y[i] lets the
// gradient through, else +0, over len(dx) elements. y is never negative,
// so "through" is y's bits, read as a signed integer, being positive
// (y > 0, or a NaN with its sign clear). The loop decides without a
// branch: a data-dependent branch here mispredicts half the time
// (BenchmarkReLUBackward: 8.4× slower).
func (o vecOps) reluBackward(dx, dy, y []float32) {
	n := len(dx)
	dy, y = dy[:n], y[:n]
	if n == 0 {
		return
	}
	if o.vector {
		reluBackwardVector(&dx[0], &dy[0], &y[0], n)
		return
	}
	for i, v := range y {
		mask := uint32((0 - int64(int32(math.Float32bits(v)))) >> 63) // all ones when the bits are > 0
		dx[i] = math.Float32frombits(math.Float32bits(dy[i]) & mask)
	}
}

// The 2×2, stride-2 max pool over one output row of n windows: window j
// holds a = r0[2j], b = r0[2j+1], c = r1[2j], d = r1[2j+1], and its
// maximum is found as PyTorch's forward finds it, scanning a, b, c, d and
// taking each value that is greater than the best so far or a NaN: the
// first of equal maxima, or the last NaN of the window (its bits kept).

// poolWinner returns window j's one-hot choice masks (all ones for the
// chosen element) and its maximum, without a branch: random data would
// mispredict a branch half the time.
func poolWinner(a, b, c, d float32) (pa, pb, pc, pd uint32, best float32) {
	best = a
	mb := takes(b, best)
	best = pick(mb, b, best)
	mc := takes(c, best)
	best = pick(mc, c, best)
	md := takes(d, best)
	best = pick(md, d, best)
	pd = md
	pc = mc &^ md
	pb = mb &^ (mc | md)
	pa = ^(mb | mc | md)
	return
}

// takes is all ones when the scan takes v over best: v > best, or v a NaN.
func takes(v, best float32) uint32 { return -(b2u(v > best) | b2u(v != v)) }

// pick is v where mask is all ones, else w, bit for bit.
func pick(mask uint32, v, w float32) float32 {
	return math.Float32frombits(math.Float32bits(w) ^ (math.Float32bits(v)^math.Float32bits(w))&mask)
}

// gather2 sets dst[i] = src[2i] for i < len(dst): a row of an image
// subsampled for a 1×1 convolution at stride 2 (phased.subsample). src
// holds at least 2·len(dst) − 1 values.
func (o vecOps) gather2(dst, src []float32) {
	n := len(dst)
	if n == 0 {
		return
	}
	src = src[:2*n-1]
	i := 0
	if o.vector {
		// Blocks of eight read sixteen values: the last block only when
		// src has its sixteenth.
		i = min(n, len(src)/2) &^ 7
		if i > 0 {
			gather2Vector(&dst[0], &src[0], i)
		}
	}
	for ; i < n; i++ {
		dst[i] = src[2*i]
	}
}

// maxPoolRow sets y[j] to window j's maximum for j < len(y).
func (o vecOps) maxPoolRow(y, r0, r1 []float32) {
	n := len(y)
	r0, r1 = r0[:2*n], r1[:2*n]
	j := 0
	if o.vector && n >= 4 {
		j = n &^ 3
		maxPoolRowVector(&y[0], &r0[0], &r1[0], j)
	}
	for ; j < n; j++ {
		_, _, _, _, y[j] = poolWinner(r0[2*j], r0[2*j+1], r1[2*j], r1[2*j+1])
	}
}

// maxPoolBackwardRow sends window j's gradient g[j] to its maximum: d0
// and d1 (the gradients of r0 and r1, 2·len(g) elements each) get g[j] at
// the maximum's place and +0 at the window's three others.
func (o vecOps) maxPoolBackwardRow(d0, d1, r0, r1, g []float32) {
	n := len(g)
	d0, d1, r0, r1 = d0[:2*n], d1[:2*n], r0[:2*n], r1[:2*n]
	j := 0
	if o.vector && n >= 4 {
		j = n &^ 3
		maxPoolBackwardRowVector(&d0[0], &d1[0], &r0[0], &r1[0], &g[0], j)
	}
	for ; j < n; j++ {
		pa, pb, pc, pd, _ := poolWinner(r0[2*j], r0[2*j+1], r1[2*j], r1[2*j+1])
		bits := math.Float32bits(g[j])
		d0[2*j] = math.Float32frombits(bits & pa)
		d0[2*j+1] = math.Float32frombits(bits & pb)
		d1[2*j] = math.Float32frombits(bits & pc)
		d1[2*j+1] = math.Float32frombits(bits & pd)
	}
}

// rowPicks takes, for each output column j < len(v) of a max pool, the
// pick of its window's elements in one input row (stride, padding and
// kernel along the row), scanning them in order without a branch: v[j]
// is the last NaN, else the first maximum, and at[j] its column. Every
// window holds at least one element (padding below the kernel, as the
// pooling layers require). ResNet's 3-wide, stride-2 windows take the
// vector kernel inside the row; rows too short for a block of eight
// (ResNet-18's 16-wide maps on CIFAR-10) take it on a copy padded with
// −∞, which no scan takes.
func (o vecOps) rowPicks(v []float32, at []int32, row []float32, stride, pad, k int) {
	n := len(v)
	at = at[:n]
	if o.vector && stride == 2 && k == 3 {
		j0 := (pad + 1) / 2 // the first window inside the row: 2·j0 ≥ pad
		first := 2*j0 - pad
		// Blocks of eight windows read row[first+2t … first+2t+17]; a
		// last block overlapping the one before takes the rest.
		nv := min(n-j0, (len(row)-2-first)/2)
		if nv >= 8 {
			rowPicksRange(v, at, row, stride, pad, k, 0, j0)
			rowPicks3Vector(&v[j0], &at[j0], &row[first], first, nv&^7)
			if last := nv - 8; nv%8 != 0 {
				rowPicks3Vector(&v[j0+last], &at[j0+last], &row[first+2*last], first+2*last, 8)
			}
			rowPicksRange(v, at, row, stride, pad, k, j0+nv, n)
			return
		}
		if nv >= minPaddedPicks {
			var padded [first3Max + 17]float32
			var bv [8]float32
			var ba [8]int32
			inner := padded[:first+17]
			copy(inner[first:], row[first:first+2*nv+1])
			for i := first + 2*nv + 1; i < len(inner); i++ {
				inner[i] = float32(math.Inf(-1))
			}
			rowPicks3Vector(&bv[0], &ba[0], &inner[first], first, 8)
			copy(v[j0:j0+nv], bv[:nv])
			copy(at[j0:j0+nv], ba[:nv])
			rowPicksRange(v, at, row, stride, pad, k, 0, j0)
			rowPicksRange(v, at, row, stride, pad, k, j0+nv, n)
			return
		}
	}
	rowPicksRange(v, at, row, stride, pad, k, 0, n)
}

// minPaddedPicks is the fewest inner windows for which a row too short
// for the vector kernel's block of eight goes through it padded; first3Max
// bounds the first inner window's start (padding 0 or 1: 0 or 1).
const (
	minPaddedPicks = 4
	first3Max      = 1
)

// rowPicksRange is rowPicks for the output columns [j0, j1).
func rowPicksRange(v []float32, at []int32, row []float32, stride, pad, k, j0, j1 int) {
	w := len(row)
	for j := j0; j < j1; j++ {
		lo := j*stride - pad
		hi := min(lo+k, w)
		lo = max(lo, 0)
		best, pos := row[lo], int32(lo)
		for c := lo + 1; c < hi; c++ {
			e := row[c]
			m := takes(e, best)
			best = pick(m, e, best)
			pos ^= (int32(c) ^ pos) & int32(m)
		}
		v[j], at[j] = best, pos
	}
}

// pickRows continues len(best) scans with the row picks of a further
// row: where the scan takes v[j] over best[j], best[j] = v[j] and at[j] =
// base + cols[j].
func (o vecOps) pickRows(best []float32, at []int32, v []float32, cols []int32, base int) {
	n := len(best)
	at, v, cols = at[:n], v[:n], cols[:n]
	j := 0
	if o.vector {
		if j = n &^ 7; j > 0 {
			pickRowsVector(&best[0], &at[0], &v[0], &cols[0], base, j)
		}
	}
	for ; j < n; j++ {
		m := takes(v[j], best[j])
		best[j] = pick(m, v[j], best[j])
		at[j] ^= ((int32(base) + cols[j]) ^ at[j]) & int32(m)
	}
}

// sgdMomentum is torch.optim.SGD's step with momentum after the first
// (no Nesterov) over len(p) elements: d = g (+ wd·p), buf = mom·buf +
// damp1·d with damp1 = 1 − dampening, p −= lr·buf, every product rounded
// on its own as the kernel rounds it.
func (o vecOps) sgdMomentum(p, g, buf []float32, lr, wd, mom, damp1 float32) {
	n := len(p)
	g, buf = g[:n], buf[:n]
	if n == 0 {
		return
	}
	if o.vector {
		if wd != 0 {
			sgdMomentumDecayVector(&p[0], &g[0], &buf[0], lr, wd, mom, damp1, n)
		} else {
			sgdMomentumVector(&p[0], &g[0], &buf[0], lr, wd, mom, damp1, n)
		}
		return
	}
	for i, w := range p {
		d := g[i]
		if wd != 0 {
			d += float32(wd * w)
		}
		b := float32(mom*buf[i]) + float32(damp1*d)
		buf[i] = b
		p[i] = w - float32(lr*b)
	}
}

// adadelta is torch.optim.Adadelta's step over len(p) elements: d = g (+
// wd·p), sq = rho·sq + (1−rho)·d·d, delta = √(acc + eps) / √(sq + eps) · d,
// acc = rho·acc + (1−rho)·delta·delta, p −= lr·delta; every operation
// rounded on its own, as the kernel rounds it (square roots and the
// division are correctly rounded in both).
func (o vecOps) adadelta(p, g, sq, acc []float32, lr, rho, eps, wd float32) {
	n := len(p)
	g, sq, acc = g[:n], sq[:n], acc[:n]
	if n == 0 {
		return
	}
	if o.vector {
		if wd != 0 {
			adadeltaDecayVector(&p[0], &g[0], &sq[0], &acc[0], lr, rho, eps, wd, n)
		} else {
			adadeltaVector(&p[0], &g[0], &sq[0], &acc[0], lr, rho, eps, wd, n)
		}
		return
	}
	rho1 := 1 - rho
	for i, w := range p {
		d := g[i]
		if wd != 0 {
			d += float32(wd * w)
		}
		s := float32(rho*sq[i]) + float32(float32(rho1*d)*d)
		sq[i] = s
		std := float32(math.Sqrt(float64(s + eps)))
		delta := float32(float32(math.Sqrt(float64(acc[i]+eps)))/std) * d
		acc[i] = float32(rho*acc[i]) + float32(float32(rho1*delta)*delta)
		p[i] = w - float32(lr*delta)
	}
}

// dropout sets mask[i] = f and y[i] = x[i]·f over len(y) elements, with f
// = 0 where uniform(seed, off + i) < p (the element is dropped), else
// keep: the random numbers are drawn by global index, so that results do
// not depend on how the elements are cut between threads.
func (o vecOps) dropout(y, mask, x []float32, p, keep float32, seed uint64, off int) {
	n := len(y)
	mask, x = mask[:n], x[:n]
	i := 0
	switch {
	case o.wide && n >= 8:
		i = n &^ 7
		dropoutWide(&y[0], &mask[0], &x[0], p, keep, seed, uint64(off), i)
	case o.vector && n >= 8:
		i = n &^ 7
		dropoutVector(&y[0], &mask[0], &x[0], p, keep, seed, uint64(off), i)
	}
	for ; i < n; i++ {
		f := keep
		if uniform(seed, uint64(off+i)) < p {
			f = 0
		}
		mask[i] = f
		y[i] = x[i] * f
	}
}

// adamConsts are one Adam step's scalars: the step size lr/(1 − β1ᵗ),
// √(1 − β2ᵗ), eps, 1 − β1, β2, 1 − β2 and the weight decay.
type adamConsts struct {
	step, bc2, eps, b1c, b2, b2c, wd float32
}

// adam is torch.optim.Adam's step (amsgrad off) over len(p) elements:
// d = g (+ wd·p), m += (d − m)·(1 − β1), v = β2·v + (1 − β2)·d·d,
// p −= step·m / (√v / bc2 + eps); every operation rounded on its own, as
// the kernel rounds it.
func (o vecOps) adam(p, g, m, v []float32, c adamConsts) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	if n == 0 {
		return
	}
	if o.vector {
		if c.wd != 0 {
			adamDecayVector(&p[0], &g[0], &m[0], &v[0], c.step, c.bc2, c.eps, c.b1c, c.b2, c.b2c, c.wd, n)
		} else {
			adamVector(&p[0], &g[0], &m[0], &v[0], c.step, c.bc2, c.eps, c.b1c, c.b2, c.b2c, c.wd, n)
		}
		return
	}
	for i, w := range p {
		d := g[i]
		if c.wd != 0 {
			d += float32(c.wd * w)
		}
		mi := m[i] + float32((d-m[i])*c.b1c)
		m[i] = mi
		vi := float32(c.b2*v[i]) + float32(float32(c.b2c*d)*d)
		v[i] = vi
		denom := float32(float32(math.Sqrt(float64(vi)))/c.bc2) + c.eps
		p[i] = w - float32(float32(c.step*mi)/denom)
	}
}
