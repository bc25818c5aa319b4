package cpu

import (
	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// Winograd F(2×2, 3×3) convolution (Lavin and Gray, 2016) for 3×3,
// stride-1 layers: each 2×2 block of outputs is computed from a 4×4 tile
// of the input as Y = Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A. Over a batch, the
// element-wise products become 16 matrix products (one per tile element
// ξ): M[ξ] = U[ξ]·V[ξ] with U[ξ] the transformed weights [F, C] and V[ξ]
// the transformed input tiles [C, tiles] — 16·F·C multiply-adds per tile
// where im2col + GEMM needs 36 for the same four outputs, and no column
// matrix nine times the input.
//
// The backward passes use the same products. The data gradient is the
// forward convolution of dy with the weights flipped and transposed
// (padding 2 − p). The weight gradient is the adjoint of the forward
// transform: dU[ξ] = Σ (A dY Aᵀ)[ξ]·V[ξ]ᵀ over the tiles, then
// dW = Gᵀ dU G.
//
// The transforms multiply by 0, ±1 and ±½ only, so the results differ
// from im2col's by a few float32 roundings (TestWinograd bounds it against
// the float64 definition).

const (
	// winoMinChannels: below this many input or output channels the
	// products are too thin for the GEMM and im2col is used
	// (BenchmarkConvAlgorithms).
	winoMinChannels = 64
	// winoGroupTiles is the number of tiles a group of images should give
	// the products at least (small feature maps are batched).
	winoGroupTiles = 256
)

// ConvAlgorithm selects how the CPU backend computes convolutions.
type ConvAlgorithm int

const (
	// ConvAuto uses Winograd F(2×2, 3×3) for 3×3 stride-1 layers with
	// enough channels, im2col + GEMM for the rest.
	ConvAuto ConvAlgorithm = iota
	// ConvIm2col uses im2col + GEMM for every layer.
	ConvIm2col
	// ConvWinograd uses Winograd for every 3×3 stride-1 layer with
	// padding up to 2, whatever its channels.
	ConvWinograd
)

// SetConvAlgorithm chooses the convolution algorithm (ConvAuto unless
// set), for comparisons and tests.
func (b *Backend) SetConvAlgorithm(a ConvAlgorithm) { b.convAlgo = a }

// useWinograd reports whether the layer's convolution runs as Winograd.
func (b *Backend) useWinograd(g geometry, p tensor.ConvParams) bool {
	if b.convAlgo == ConvIm2col || p.KernelH != 3 || p.KernelW != 3 || p.StrideH != 1 || p.StrideW != 1 ||
		p.PadH > 2 || p.PadW > 2 || g.oh < 1 || g.ow < 1 {
		return false
	}
	return b.convAlgo == ConvWinograd || g.c >= winoMinChannels && g.f >= winoMinChannels
}

// winoShape is the tiling of one image's output: th×tw tiles of 2×2.
type winoShape struct {
	th, tw, tiles int
}

func winoTiling(oh, ow int) winoShape {
	s := winoShape{th: (oh + 1) / 2, tw: (ow + 1) / 2}
	s.tiles = s.th * s.tw
	return s
}

// winoStride is the distance between the 16 matrices of a transformed
// operand of n elements each: n rounded up to 4 KiB and one cache line
// more, so that the 16 streams a transform reads or writes at once do not
// all fall into the same cache sets (with n·4 a multiple of 4 KiB, the
// weight transform of CIFARNet's last layer ran at half speed).
func winoStride(n int) int { return roundUp(n, 1024) + 16 }

func roundUp(a, b int) int { return ceilDiv(a, b) * b }

// winogradWeights sets u [16][rows][cols] (matrices winoStride apart) to G w Gᵀ of every 3×3 kernel
// of w [F, C, 3, 3]: rows F and cols C, or, flipped, rows C and cols F
// with each kernel rotated by 180° (the data gradient's weights).
func winogradWeights(u, w []float32, f, c int, flipped bool) {
	rows, cols := f, c
	if flipped {
		rows, cols = c, f
	}
	es := winoStride(rows * cols)
	var g [9]float32
	// Row by row of u, so that each of its 16 matrices is written in
	// order.
	for row := range rows {
		for col := range cols {
			at := row*cols + col
			if flipped {
				k := w[(col*c+row)*9 : (col*c+row)*9+9]
				for j := range 9 {
					g[j] = k[8-j]
				}
			} else {
				copy(g[:], w[at*9:at*9+9])
			}
			// t = G g: 4×3.
			var t [12]float32
			for q := range 3 {
				g0, g1, g2 := g[q], g[3+q], g[6+q]
				t[q] = g0
				t[3+q] = 0.5 * (g0 + g1 + g2)
				t[6+q] = 0.5 * (g0 - g1 + g2)
				t[9+q] = g2
			}
			// u = t Gᵀ: 4×4.
			for r := range 4 {
				t0, t1, t2 := t[r*3], t[r*3+1], t[r*3+2]
				u[(r*4+0)*es+at] = t0
				u[(r*4+1)*es+at] = 0.5 * (t0 + t1 + t2)
				u[(r*4+2)*es+at] = 0.5 * (t0 - t1 + t2)
				u[(r*4+3)*es+at] = t2
			}
		}
	}
}

// winoRows is a transform's working memory: rows of one row of tiles.
type winoRows struct {
	buf  []float32
	rows [10][]float32
}

// get returns k zeroed rows of length n.
func (r *winoRows) get(k, n int) [][]float32 {
	buf := grow(&r.buf, k*n)
	clear(buf)
	for i := range k {
		r.rows[i] = buf[i*n : (i+1)*n : (i+1)*n]
	}
	return r.rows[:k]
}

// tileRow returns where row r of the 4×4 tile elements (ξ = 4r … 4r+3)
// of n consecutive tiles lies in a transformed operand x whose 16
// matrices are es apart: four slices of n elements from offset at.
func tileRow(x []float32, es, at, r, n int) (x0, x1, x2, x3 []float32) {
	return x[(r*4+0)*es+at:][:n], x[(r*4+1)*es+at:][:n], x[(r*4+2)*es+at:][:n], x[(r*4+3)*es+at:][:n]
}

// winogradInput writes Bᵀ d B of every 4×4 input tile of one image
// x [C, H, W] into v: element ξ of tile t of channel ch at
// v[ξ·es + ch·ld + t0 + t]. Tile (i, j) starts at row 2i − padH, column
// 2j − padW; what lies outside the image is zero. It works a row of
// tiles at a time: Bᵀ down the four rows (contiguous loops over padded
// copies), then B along them, tile by tile.
func winogradInput(v []float32, es, ld, t0 int, x []float32, c, h, w, padH, padW int, s winoShape, work *winoRows) {
	pw := 2*s.tw + 2 // the padded width the tiles span
	rows := work.get(8, pw)
	d, t := rows[:4], rows[4:]
	for ch := range c {
		plane := x[ch*h*w : (ch+1)*h*w]
		for i := range s.th {
			y0 := 2*i - padH
			for r := range 4 {
				clear(d[r])
				if y := y0 + r; y >= 0 && y < h {
					copy(d[r][padW:padW+w], plane[y*w:(y+1)*w])
				}
			}
			// Bᵀ d: rows d0 − d2, d1 + d2, d2 − d1, d1 − d3.
			t0r := t[0]
			t1r, t2r, t3r := t[1][:len(t0r)], t[2][:len(t0r)], t[3][:len(t0r)]
			d0, d1, d2, d3 := d[0][:len(t0r)], d[1][:len(t0r)], d[2][:len(t0r)], d[3][:len(t0r)]
			for k := range t0r {
				t0r[k] = d0[k] - d2[k]
				t1r[k] = d1[k] + d2[k]
				t2r[k] = d2[k] - d1[k]
				t3r[k] = d1[k] - d3[k]
			}
			// (Bᵀ d) B: the same along each row, tile by tile.
			at := ch*ld + t0 + i*s.tw
			for r := range 4 {
				row := t[r]
				v0, v1, v2, v3 := tileRow(v, es, at, r, s.tw)
				for j := range v0 {
					a := row[2*j : 2*j+4 : 2*j+4]
					v0[j] = a[0] - a[2]
					v1[j] = a[1] + a[2]
					v2[j] = a[2] - a[1]
					v3[j] = a[1] - a[3]
				}
			}
		}
	}
}

// winogradOutput sets one image's output y [F, OH, OW] from the products
// m (element ξ of tile t of filter o at m[ξ·es + o·ld + t0 + t]) as
// Aᵀ m A, plus the bias when there is one; the part of a tile past an odd
// edge is dropped.
func winogradOutput(y []float32, m []float32, es, ld, t0 int, f, oh, ow int, s winoShape, bias []float32, work *winoRows) {
	rows := work.get(9, 2*s.tw)
	c, out := rows[:8], rows[8]
	k := s.tw
	for o := range f {
		plane := y[o*oh*ow : (o+1)*oh*ow]
		var b float32
		if bias != nil {
			b = bias[o]
		}
		for i := range s.th {
			at := o*ld + t0 + i*s.tw
			// c = Aᵀ m: rows m0 + m1 + m2 and m1 − m2 − m3, for each
			// column q of the tiles.
			for q := range 4 {
				m0 := m[(0+q)*es+at:][:k]
				m1, m2, m3 := m[(4+q)*es+at:][:k], m[(8+q)*es+at:][:k], m[(12+q)*es+at:][:k]
				c0, c1 := c[q][:k], c[4+q][:k]
				for j := range m0 {
					c0[j] = m0[j] + m1[j] + m2[j]
					c1[j] = m1[j] - m2[j] - m3[j]
				}
			}
			// (Aᵀ m) A: two outputs of each tile along each of two rows.
			for r := range 2 {
				if 2*i+r >= oh {
					break
				}
				c0 := c[4*r][:k]
				c1, c2, c3 := c[4*r+1][:k], c[4*r+2][:k], c[4*r+3][:k]
				row := out[:2*k]
				for j := range c0 {
					p := row[2*j : 2*j+2 : 2*j+2]
					p[0] = c0[j] + c1[j] + c2[j] + b
					p[1] = c1[j] - c2[j] - c3[j] + b
				}
				copy(plane[(2*i+r)*ow:(2*i+r+1)*ow], row)
			}
		}
	}
}

// winogradOutputGrad writes A dY Aᵀ of every 2×2 block of one image's
// output gradient dy [F, OH, OW] into m, laid out as winogradOutput reads
// it (zero past an odd edge).
func winogradOutputGrad(m []float32, es, ld, t0 int, dy []float32, f, oh, ow int, s winoShape, work *winoRows) {
	rows := work.get(6, 2*s.tw)
	y, a := rows[:2], rows[2:]
	for o := range f {
		plane := dy[o*oh*ow : (o+1)*oh*ow]
		for i := range s.th {
			for r := range 2 {
				clear(y[r])
				if 2*i+r < oh {
					copy(y[r], plane[(2*i+r)*ow:(2*i+r+1)*ow])
				}
			}
			// A dY: rows y0, y0 + y1, y0 − y1, −y1.
			y0 := y[0]
			y1 := y[1][:len(y0)]
			a0, a1, a2, a3 := a[0][:len(y0)], a[1][:len(y0)], a[2][:len(y0)], a[3][:len(y0)]
			for k := range y0 {
				a0[k], a1[k], a2[k], a3[k] = y0[k], y0[k]+y1[k], y0[k]-y1[k], -y1[k]
			}
			// (A dY) Aᵀ: the same along each row, tile by tile.
			at := o*ld + t0 + i*s.tw
			for r := range 4 {
				row := a[r]
				m0, m1, m2, m3 := tileRow(m, es, at, r, s.tw)
				for j := range m0 {
					pq := row[2*j : 2*j+2 : 2*j+2]
					p, q := pq[0], pq[1]
					m0[j], m1[j], m2[j], m3[j] = p, p+q, p-q, -q
				}
			}
		}
	}
}

// winogradWeightGrad adds Gᵀ du G, from du [16][F][C], to the weight
// gradient dw [F, C, 3, 3].
func winogradWeightGrad(dw, du []float32, f, c int) {
	es := winoStride(f * c)
	for at := range f * c {
		// t = Gᵀ du: 3×4.
		var t [12]float32
		for q := range 4 {
			u0, u1, u2, u3 := du[q*es+at], du[(4+q)*es+at], du[(8+q)*es+at], du[(12+q)*es+at]
			t[q] = u0 + 0.5*(u1+u2)
			t[4+q] = 0.5 * (u1 - u2)
			t[8+q] = 0.5*(u1+u2) + u3
		}
		k := dw[at*9 : at*9+9]
		for r := range 3 {
			t0, t1, t2, t3 := t[r*4], t[r*4+1], t[r*4+2], t[r*4+3]
			k[r*3] += t0 + 0.5*(t1+t2)
			k[r*3+1] += 0.5 * (t1 - t2)
			k[r*3+2] += 0.5*(t1+t2) + t3
		}
	}
}

// winogradProducts runs the 16 products c[ξ] = a[ξ]·b[ξ] (+ c[ξ] when
// accumulate): a [16][m][k], b [16][k][n] (or [16][n][k] transposed, row
// stride ldb), c [16][m][n], each's matrices winoStride apart.
func (t *convTask) winogradProducts(worker, m, n, k int, a, b []float32, ldb int, transB bool, c []float32, accumulate bool) {
	var beta float32
	if accumulate {
		beta = 1
	}
	as, bs, cs := winoStride(m*k), winoStride(k*n), winoStride(m*n)
	for e := range 16 {
		am := gemm.Matrix{Data: a[e*as : e*as+m*k], Stride: k}
		bm := gemm.Matrix{Data: b[e*bs : e*bs+k*n], Stride: ldb, Trans: transB}
		t.gemm(worker, m, n, k, am, bm, beta, gemm.Matrix{Data: c[e*cs : e*cs+m*n], Stride: n})
	}
}

// winogradChunk runs chunk i of the batch as Winograd convolutions, in
// groups of images of at least winoGroupTiles tiles.
func (t *convTask) winogradChunk(worker, i int) {
	g, p := t.g, t.p
	s := &t.b.chunks[i]
	lo, hi := i*t.per, min((i+1)*t.per, t.n)
	out := winoTiling(g.oh, g.ow)
	inLen, outLen := g.c*g.h*g.wd, g.f*g.ohw
	group := max(1, min(hi-lo, ceilDiv(winoGroupTiles, out.tiles)))
	v := grow(&s.col, 16*winoStride(g.c*group*out.tiles))
	m := grow(&s.ybuf, 16*winoStride(g.f*group*out.tiles))
	if !t.backward {
		var bias []float32
		if t.bias != nil {
			bias = t.bias.Data
		}
		for first := lo; first < hi; first += group {
			n := min(group, hi-first)
			ld := n * out.tiles
			for k := range n {
				winogradInput(v, winoStride(g.c*ld), ld, k*out.tiles, t.x.Data[(first+k)*inLen:(first+k+1)*inLen], g.c, g.h, g.wd, p.PadH, p.PadW, out, &s.wino)
			}
			t.winogradProducts(worker, g.f, ld, g.c, t.b.winoU, v, ld, false, m, false)
			for k := range n {
				winogradOutput(t.y.Data[(first+k)*outLen:(first+k+1)*outLen], m, winoStride(g.f*ld), ld, k*out.tiles, g.f, g.oh, g.ow, out, bias, &s.wino)
			}
		}
		return
	}
	// The weight gradient: dU = Σ (A dY Aᵀ)·Vᵀ over the chunk's tiles.
	du := grow(&s.dcol, 16*winoStride(g.f*g.c))
	clear(du)
	clear(grow(&s.db, g.f))
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		ld := n * out.tiles
		for k := range n {
			winogradInput(v, winoStride(g.c*ld), ld, k*out.tiles, t.x.Data[(first+k)*inLen:(first+k+1)*inLen], g.c, g.h, g.wd, p.PadH, p.PadW, out, &s.wino)
			dyn := t.dy.Data[(first+k)*outLen : (first+k+1)*outLen]
			winogradOutputGrad(m, winoStride(g.f*ld), ld, k*out.tiles, dyn, g.f, g.oh, g.ow, out, &s.wino)
			for f := range g.f {
				var sum float32
				for _, x := range dyn[f*g.ohw : (f+1)*g.ohw] {
					sum += x
				}
				s.db[f] += sum
			}
		}
		t.winogradProducts(worker, g.f, g.c, ld, m, v, ld, true, du, true)
	}
	dw := grow(&s.dw, g.f*g.ckk)
	clear(dw)
	winogradWeightGrad(dw, du, g.f, g.c)
	if t.dx == nil {
		return
	}
	// The data gradient: dy convolved with the flipped, transposed
	// weights (winoU, set so for the backward pass), padding 2 − p, gives
	// dx [C, H, W].
	in := winoTiling(g.h, g.wd)
	group = max(1, min(hi-lo, ceilDiv(winoGroupTiles, in.tiles)))
	v = grow(&s.col, 16*winoStride(g.f*group*in.tiles))
	m = grow(&s.ybuf, 16*winoStride(g.c*group*in.tiles))
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		ld := n * in.tiles
		for k := range n {
			winogradInput(v, winoStride(g.f*ld), ld, k*in.tiles, t.dy.Data[(first+k)*outLen:(first+k+1)*outLen], g.f, g.oh, g.ow, 2-p.PadH, 2-p.PadW, in, &s.wino)
		}
		t.winogradProducts(worker, g.c, ld, g.f, t.b.winoU, v, ld, false, m, false)
		for k := range n {
			winogradOutput(t.dx.Data[(first+k)*inLen:(first+k+1)*inLen], m, winoStride(g.c*ld), ld, k*in.tiles, g.c, g.h, g.wd, in, nil, &s.wino)
		}
	}
}
