package cpu

// vecOps are the element-wise loops that run often enough to pay for
// vector kernels: the Winograd transforms' six operations (winograd.go)
// on rows of tiles (n consecutive tiles' values of one tile element) or
// on rows of an image, and batch norm's two per-element passes (norm.go).
// It runs them with the AVX2 kernels of vecops_amd64.s where the
// processor has them (vector true), else with the loops below; both give
// the same bits (TestVecOps): the loops round every product to float32
// (explicit conversions), so that no compiler fuses a multiply and an add
// the kernels do apart. The operations over several rows take each row's
// start as a stride in elements: rows of a plane, or every other row.
type vecOps struct {
	vector bool
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

// affine sets y[i] = x[i]·scale + shift over len(y) elements (batch
// norm's normalisation with its scale and shift folded).
func (o vecOps) affine(y, x []float32, scale, shift float32) {
	n := len(y)
	x = x[:n]
	if n == 0 {
		return
	}
	if o.vector {
		affineVector(&y[0], &x[0], scale, shift, n)
		return
	}
	for i, v := range x {
		y[i] = float32(v*scale) + shift
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
