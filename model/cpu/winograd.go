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
	// (BenchmarkConvAlgorithms); with the vector transforms
	// (vecops_amd64.s) Winograd wins from winoMinChannelsVector.
	winoMinChannels       = 64
	winoMinChannelsVector = 16
	// winoGroupTiles is the number of tiles a group of images should give
	// the products at least (small feature maps are batched).
	winoGroupTiles = 256
)

// ConvAlgorithm selects how the CPU backend computes convolutions.
type ConvAlgorithm int

const (
	// ConvAuto uses Winograd F(2×2, 3×3) for 3×3 stride-1 layers with
	// enough channels and outputs, im2col + GEMM for the rest.
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
	return b.convAlgo == ConvWinograd || min(g.c, g.f) >= b.winoMinChannels() && winoTiling(g.oh, g.ow).tiles >= winoMinTiles
}

// winoMinTiles is the fewest 2×2 tiles an image's output must have for
// ConvAuto to run a layer as Winograd: below, the weights' transform and
// packing, once a call, outweigh the products it saves (ResNet-18's
// 256-channel layer on CIFAR-10's 2×2 maps, one tile an image, ran 1.2×
// slower than im2col; its 128-channel one on 4×4 maps, four tiles, 1.6×
// faster; BenchmarkConvAlgorithms).
const winoMinTiles = 4

// winoMinChannels is the fewest input and output channels for which
// ConvAuto runs a layer as Winograd.
func (b *Backend) winoMinChannels() int {
	if b.vec.vector {
		return winoMinChannelsVector
	}
	return winoMinChannels
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
// with each kernel rotated by 180° (the data gradient's weights). With
// the vector kernels, a block of kernels at a time, their nine elements
// are spread into nine planes (element j of each kernel in plane j), then
// G is applied down the columns and along the rows of every kernel at
// once, plane by plane, the second time straight into u's matrices
// (BenchmarkWinogradWeights: 1.3–1.5× the loop kernel by kernel, which
// the extra pass would make slower without them). Both give the same
// bits (TestWinogradWeightsForms).
func winogradWeights(ops vecOps, u, w []float32, f, c int, flipped bool, work *winoRows) {
	if !ops.vector {
		rows, cols := f, c
		if flipped {
			rows, cols = c, f
		}
		winogradWeightsByKernel(u, w, f, c, rows, cols, flipped)
		return
	}
	winogradWeightsBlocks(ops, u, w, f, c, flipped, work, 0, ceilDiv(f*c, winoWeightBlock))
}

// winoWeightBlock is how many kernels winogradWeights' vector form
// transforms at a time: 84 KiB of planes.
const winoWeightBlock = 1024

// winoPlaneStride is how far apart the weight transforms lay their
// planes of a block's kernels: a cache line more than 4 KiB, as at 4 KiB
// exactly the same element of the nine (or twelve, or eighteen) fell
// into one set of the L1 cache, and writing them took most of the pass.
const winoPlaneStride = winoWeightBlock + 16

// winogradWeightsBlocks is winogradWeights with the vector kernels over
// blocks [first, last) of winoWeightBlock kernels (in u's order), so
// that threads can share the work (weightsTask).
func winogradWeightsBlocks(ops vecOps, u, w []float32, f, c int, flipped bool, work *winoRows, first, last int) {
	rows, cols := f, c
	if flipped {
		rows, cols = c, f
	}
	n := rows * cols
	es := winoStride(n)
	const block, stride = winoWeightBlock, winoPlaneStride
	buf := grow(&work.buf, 21*stride)
	g, t := buf[:9*stride], buf[9*stride:21*stride] // g's nine planes; t = G g, [4][3]
	for lo := first * block; lo < min(n, last*block); lo += block {
		m := min(block, n-lo)
		gp := func(j int) []float32 { return g[j*stride : j*stride+m] }
		spreadKernels([9][]float32{gp(0), gp(1), gp(2), gp(3), gp(4), gp(5), gp(6), gp(7), gp(8)}, w, lo, c, cols, flipped, flipped)
		tp := func(j int) []float32 { return t[j*stride : j*stride+m] }
		for q := range 3 {
			ops.g4(tp(q), tp(3+q), tp(6+q), tp(9+q), gp(q), gp(3+q), gp(6+q))
		}
		up := func(j int) []float32 { return u[j*es+lo : j*es+lo+m] }
		for r := range 4 {
			ops.g4(up(4*r), up(4*r+1), up(4*r+2), up(4*r+3), tp(3*r), tp(3*r+1), tp(3*r+2))
		}
	}
}

// spreadKernels sets element j of kernel lo+i, in u's order, to g[j][i]
// for i < len(g[0]): kernel (F·C index) lo+i of w, or, transposed, kernel
// col·c + row for u's row·cols + col = lo+i, rotated by 180° (element
// 8−j) when also flipped (the data gradient's). Without a division or a
// variable-length copy a kernel: this pass took most of the vector form's
// time (BenchmarkWinogradWeights).
func spreadKernels(g [9][]float32, w []float32, lo, c, cols int, transposed, flipped bool) {
	m := len(g[0])
	g0, g1, g2, g3, g4, g5, g6, g7, g8 := g[0][:m], g[1][:m], g[2][:m], g[3][:m], g[4][:m], g[5][:m], g[6][:m], g[7][:m], g[8][:m]
	if !transposed {
		src := w[lo*9 : (lo+m)*9]
		for i := range g0 {
			k := (*[9]float32)(src[i*9 : i*9+9])
			g0[i], g1[i], g2[i], g3[i], g4[i], g5[i], g6[i], g7[i], g8[i] = k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8]
		}
		return
	}
	row, col := lo/cols, lo%cols
	for i := range g0 {
		at := (col*c + row) * 9
		k := (*[9]float32)(w[at : at+9])
		if flipped {
			g0[i], g1[i], g2[i], g3[i], g4[i], g5[i], g6[i], g7[i], g8[i] = k[8], k[7], k[6], k[5], k[4], k[3], k[2], k[1], k[0]
		} else {
			g0[i], g1[i], g2[i], g3[i], g4[i], g5[i], g6[i], g7[i], g8[i] = k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8]
		}
		if col++; col == cols {
			row, col = row+1, 0
		}
	}
}

// winogradWeightsByKernel is winogradWeights without vector kernels: one
// kernel at a time.
func winogradWeightsByKernel(u, w []float32, f, c, rows, cols int, flipped bool) {
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

// winoRows is a transform's working memory.
type winoRows struct {
	buf []float32
}

// get returns n zeroed elements.
func (r *winoRows) get(n int) []float32 {
	buf := grow(&r.buf, n)
	clear(buf)
	return buf
}

// winogradInput writes Bᵀ d B of every 4×4 input tile of images images
// x [images][C, H, W] into v: element ξ of tile t of channel ch of image
// k at v[ξ·es + ch·ld + k·tiles + t]. Tile (i, j) starts at row 2i −
// padH, column 2j − padW; what lies outside the image is zero. Each
// channel is copied into a padded plane, B is applied along its rows
// (hbt4, the even rows and the odd rows apart, so that a tile row's four
// image rows are two rows of each, one tile row apart), then Bᵀ down the
// columns of tiles over the whole plane at once. The images are taken
// channel by channel, so that each of v's 16 matrices is written in
// order rather than a cache line here and there (measured: the writes
// were a sixth of a small-image layer's time, stalled on cache misses).
func winogradInput(ops vecOps, v []float32, es, ld int, x []float32, images, c, h, w, padH, padW int, s winoShape, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	pw, hp := 2*tw+2, 2*th+2 // the padded width and height the tiles span
	half := 4 * (th + 1) * tw
	buf := work.get(hp*pw + 2*half)
	// padded: the channel with its padding, zero outside the image (only
	// the image's part is written); de, do: d B of the even and of the
	// odd padded rows, [4][th+1][tw] (tile column q first).
	padded, de, do := buf[:hp*pw], buf[hp*pw:hp*pw+half], buf[hp*pw+half:]
	q4 := func(d []float32) (d0, d1, d2, d3 []float32) {
		n := (th + 1) * tw
		return d[:n], d[n : 2*n], d[2*n : 3*n], d[3*n:]
	}
	e0, e1, e2, e3 := q4(de)
	o0, o1, o2, o3 := q4(do)
	evens, odds := [4][]float32{e0, e1, e2, e3}, [4][]float32{o0, o1, o2, o3}
	// Without padding, the tiles lie inside the image: its rows are read
	// in place, w apart, instead of copied.
	inPlace := padH == 0 && padW == 0 && w >= pw && h >= hp
	imgLen := c * h * w
	for ch := range c {
		for k := range images {
			plane := x[k*imgLen+ch*h*w:][:h*w]
			rows, stride := padded, pw
			if inPlace {
				rows, stride = plane, w
			} else {
				for iy := max(0, -padH); iy < h && iy+padH < hp; iy++ {
					y := iy + padH
					copy(padded[y*pw+padW:y*pw+padW+w], plane[iy*w:(iy+1)*w])
				}
			}
			ops.hbt4(e0, e1, e2, e3, tw, rows, 2*stride, tw, th+1)
			ops.hbt4(o0, o1, o2, o3, tw, rows[stride:], 2*stride, tw, th+1)
			at := ch*ld + k*tiles
			for q := range 4 {
				e, o := evens[q], odds[q]
				v0, v1, v2, v3 := v[(0+q)*es+at:][:tiles], v[(4+q)*es+at:][:tiles], v[(8+q)*es+at:][:tiles], v[(12+q)*es+at:][:tiles]
				// Tile row i reads padded rows 2i, 2i + 1, 2i + 2, 2i + 3.
				ops.bt4(v0, v1, v2, v3, e, o, e[tw:], o[tw:])
			}
		}
	}
}

// winogradOutput sets images images' outputs y [images][F, OH, OW] from
// the products m (element ξ of tile t of filter o of image k at m[ξ·es +
// o·ld + k·tiles + t]) as Aᵀ m A, plus the bias when there is one; the
// part of a tile past an odd edge is dropped. Each step runs over all the
// filter's tiles at once; the last puts each tile's two columns in place,
// the even output rows and the odd ones apart. Images are taken filter
// by filter, so that m is read in order (see winogradInput).
func winogradOutput(ops vecOps, y []float32, m []float32, es, ld, images int, f, oh, ow int, s winoShape, bias []float32, work *winoRows) {
	tw, tiles := s.tw, s.tiles
	n := 12 * tiles
	if ow != 2*tw {
		n += 2 * tw * s.th // whole tile rows, cut to ow when copied
	}
	buf := work.get(n)
	// c: Aᵀ m, [2][4][tiles]; p: its A, [2][2][tiles] (output row r,
	// column 2j + k at p[(2r + k)·tiles + tile]).
	c, p, rows := buf[:8*tiles], buf[8*tiles:12*tiles], buf[12*tiles:]
	part := func(d []float32, i int) []float32 { return d[i*tiles : (i+1)*tiles] }
	for o := range f {
		for k := range images { // each filter, image by image: m in order
			plane := y[(k*f+o)*oh*ow:][:oh*ow]
			var b float32
			if bias != nil {
				b = bias[o]
			}
			at := o*ld + k*tiles
			for q := range 4 {
				ops.at2(part(c, q), part(c, 4+q), m[(0+q)*es+at:][:tiles], m[(4+q)*es+at:][:tiles], m[(8+q)*es+at:][:tiles], m[(12+q)*es+at:][:tiles])
			}
			for r := range 2 {
				count := (oh - r + 1) / 2 // output rows 2i + r
				if count == 0 {
					break
				}
				ops.at2(part(p, 2*r), part(p, 2*r+1), part(c, 4*r), part(c, 4*r+1), part(c, 4*r+2), part(c, 4*r+3))
				if ow == 2*tw {
					ops.interleave(plane[r*ow:], 2*ow, part(p, 2*r), part(p, 2*r+1), tw, b, tw, count)
					continue
				}
				ops.interleave(rows, 2*tw, part(p, 2*r), part(p, 2*r+1), tw, b, tw, count)
				for i := range count {
					copy(plane[(2*i+r)*ow:(2*i+r+1)*ow], rows[i*2*tw:])
				}
			}
		}
	}
}

// winogradOutputGrad writes A dY Aᵀ of every 2×2 block of images
// images' output gradients dy [images][F, OH, OW] into m, laid out as
// winogradOutput reads it (zero past an odd edge): the even and the odd
// rows and columns apart, then A along the rows and down the columns,
// each over all the filter's tiles at once; images filter by filter, so
// that m is written in order (see winogradInput).
func winogradOutputGrad(ops vecOps, m []float32, es, ld int, dy []float32, images, f, oh, ow int, s winoShape, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	buf := work.get(12 * tiles)
	part := func(i int) []float32 { return buf[i*tiles : (i+1)*tiles] }
	// dY's element (2i + r, 2j + k) at part(2r + k)[i·tw + j]: a row or
	// column past an odd edge stays zero.
	even0, odd0, even1, odd1 := part(0), part(1), part(2), part(3)
	h0, h1 := buf[4*tiles:8*tiles], buf[8*tiles:] // dY Aᵀ of rows 2i and 2i + 1, [4][tiles]
	hpart := func(h []float32, q int) []float32 { return h[q*tiles : (q+1)*tiles] }
	for o := range f {
		for k := range images { // each filter, image by image: m in order
			plane := dy[(k*f+o)*oh*ow:][:oh*ow]
			ops.deinterleave(even0, odd0, tw, plane, 2*ow, ow/2, th)
			ops.deinterleave(even1, odd1, tw, plane[min(ow, len(plane)):], 2*ow, ow/2, oh/2)
			if ow%2 == 1 {
				for y := range oh {
					even := even0
					if y%2 == 1 {
						even = even1
					}
					even[(y/2)*tw+tw-1] = plane[y*ow+ow-1]
				}
			}
			ops.a4(hpart(h0, 0), hpart(h0, 1), hpart(h0, 2), hpart(h0, 3), even0, odd0)
			ops.a4(hpart(h1, 0), hpart(h1, 1), hpart(h1, 2), hpart(h1, 3), even1, odd1)
			at := o*ld + k*tiles
			for q := range 4 {
				m0, m1, m2, m3 := m[(0+q)*es+at:][:tiles], m[(4+q)*es+at:][:tiles], m[(8+q)*es+at:][:tiles], m[(12+q)*es+at:][:tiles]
				ops.a4(m0, m1, m2, m3, hpart(h0, q), hpart(h1, q))
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

// winogradProducts runs the count products c[ξ] = op(a[ξ])·op(b[ξ])
// (+ c[ξ] when accumulate), op(a[ξ]) m×k and op(b[ξ]) k×n, one for each
// tile element (16, or 36 for F(4×4, 3×3)): a and b give the matrices'
// data, each's row stride and whether it is transposed; c is
// [count][m][n]; each operand's matrices winoStride apart. pa or pb,
// when set, are a prepared layer's packings of a's or b's matrices (U's).
func (t *convTask) winogradProducts(worker, count, m, n, k int, a, b gemm.Matrix, pa []gemm.PackedA, pb []gemm.PackedB, c []float32, accumulate bool) {
	var beta float32
	if accumulate {
		beta = 1
	}
	as, bs, cs := winoStride(m*k), winoStride(k*n), winoStride(m*n)
	for e := range count {
		am := gemm.Matrix{Data: a.Data[e*as : e*as+m*k], Stride: a.Stride, Trans: a.Trans}
		bm := gemm.Matrix{Data: b.Data[e*bs : e*bs+k*n], Stride: b.Stride, Trans: b.Trans}
		cm := gemm.Matrix{Data: c[e*cs : e*cs+m*n], Stride: n}
		switch {
		case pa != nil:
			t.gemmA(worker, m, n, k, am, &pa[e], bm, beta, cm)
		case pb != nil:
			t.gemmPacked(worker, m, n, k, am, pb[e], beta, cm)
		default:
			t.gemm(worker, m, n, k, am, bm, beta, cm)
		}
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
	if !t.backward && t.tile == 4 {
		t.winograd4Forward(worker, s, lo, hi)
		return
	}
	v := grow(&s.col, 16*winoStride(g.c*group*out.tiles))
	m := grow(&s.ybuf, 16*winoStride(g.f*group*out.tiles))
	if !t.backward {
		var bias []float32
		if t.bias != nil {
			bias = t.bias.Data
		}
		last := t.channelsLast(out)
		for first := lo; first < hi; first += group {
			n := min(group, hi-first)
			ld := n * out.tiles
			x, y := t.x.Data[first*inLen:(first+n)*inLen], t.y.Data[first*outLen:(first+n)*outLen]
			if last {
				winogradInputLast(t.b.vec, v, winoStride(g.c*ld), x, n, g.c, g.h, g.wd, p.PadH, p.PadW, out, &s.wino)
				t.winogradProducts(worker, 16, ld, g.f, g.c, gemm.Matrix{Data: v, Stride: g.c}, gemm.Matrix{Data: t.u, Stride: g.c, Trans: true}, nil, t.uPacked, m, false)
				winogradOutputLast(t.b.vec, y, m, winoStride(g.f*ld), n, g.f, g.oh, g.ow, out, bias, &s.wino)
			} else {
				winogradInput(t.b.vec, v, winoStride(g.c*ld), ld, x, n, g.c, g.h, g.wd, p.PadH, p.PadW, out, &s.wino)
				t.winogradProducts(worker, 16, g.f, ld, g.c, gemm.Matrix{Data: t.u, Stride: g.c}, gemm.Matrix{Data: v, Stride: ld}, t.aPacked, nil, m, false)
				winogradOutput(t.b.vec, y, m, winoStride(g.f*ld), ld, n, g.f, g.oh, g.ow, out, bias, &s.wino)
			}
			for k := first; k < first+n; k++ {
				t.normalise(t.y.Data[k*outLen:(k+1)*outLen], k)
			}
		}
		return
	}
	clear(grow(&s.db, g.f))
	if t.weightGrad {
		t.winogradWeightGrad(worker, s, lo, hi, group, out, v, m)
	} else if t.biasGrad {
		for k := lo; k < hi; k++ {
			t.addBiasGrad(s, t.dy.Data[k*outLen:(k+1)*outLen])
		}
	}
	if t.dx == nil {
		return
	}
	// The data gradient: dy convolved with the flipped, transposed
	// weights (t.u, set so for the backward pass), padding 2 − p, gives
	// dx [C, H, W].
	in := winoTiling(g.h, g.wd)
	group = max(1, min(hi-lo, ceilDiv(winoGroupTiles, in.tiles)))
	v = grow(&s.col, 16*winoStride(g.f*group*in.tiles))
	m = grow(&s.ybuf, 16*winoStride(g.c*group*in.tiles))
	last := t.channelsLast(in)
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		ld := n * in.tiles
		dy, dx := t.dy.Data[first*outLen:(first+n)*outLen], t.dx.Data[first*inLen:(first+n)*inLen]
		if last {
			winogradInputLast(t.b.vec, v, winoStride(g.f*ld), dy, n, g.f, g.oh, g.ow, 2-p.PadH, 2-p.PadW, in, &s.wino)
			t.winogradProducts(worker, 16, ld, g.c, g.f, gemm.Matrix{Data: v, Stride: g.f}, gemm.Matrix{Data: t.u, Stride: g.f, Trans: true}, nil, nil, m, false)
			winogradOutputLast(t.b.vec, dx, m, winoStride(g.c*ld), n, g.c, g.h, g.wd, in, nil, &s.wino)
			continue
		}
		winogradInput(t.b.vec, v, winoStride(g.f*ld), ld, dy, n, g.f, g.oh, g.ow, 2-p.PadH, 2-p.PadW, in, &s.wino)
		t.winogradProducts(worker, 16, g.c, ld, g.f, gemm.Matrix{Data: t.u, Stride: g.f}, gemm.Matrix{Data: v, Stride: ld}, nil, nil, m, false)
		winogradOutput(t.b.vec, dx, m, winoStride(g.c*ld), ld, n, g.c, g.h, g.wd, in, nil, &s.wino)
	}
}

// winogradWeightGrad adds the weight (and, when wanted, bias) gradient of
// the chunk's images [lo, hi) to s: dU = Σ (A dY Aᵀ)·Vᵀ over their tiles,
// in groups of group images, v and m the chunk's transform scratch.
func (t *convTask) winogradWeightGrad(worker int, s *scratch, lo, hi, group int, out winoShape, v, m []float32) {
	g, p := t.g, t.p
	inLen, outLen := g.c*g.h*g.wd, g.f*g.ohw
	du := grow(&s.dcol, 16*winoStride(g.f*g.c))
	clear(du)
	last := t.channelsLast(out)
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		ld := n * out.tiles
		x, dy := t.x.Data[first*inLen:(first+n)*inLen], t.dy.Data[first*outLen:(first+n)*outLen]
		if t.biasGrad {
			for k := range n {
				t.addBiasGrad(s, dy[k*outLen:(k+1)*outLen])
			}
		}
		if !last {
			winogradInput(t.b.vec, v, winoStride(g.c*ld), ld, x, n, g.c, g.h, g.wd, p.PadH, p.PadW, out, &s.wino)
			winogradOutputGrad(t.b.vec, m, winoStride(g.f*ld), ld, dy, n, g.f, g.oh, g.ow, out, &s.wino)
			t.winogradProducts(worker, 16, g.f, g.c, ld, gemm.Matrix{Data: m, Stride: ld}, gemm.Matrix{Data: v, Stride: ld, Trans: true}, nil, nil, du, true)
			continue
		}
		// dU[ξ] += M̂[ξ]ᵀ·V̂[ξ]: both operands tiles × channels, so that
		// the GEMM packs them by copying rows.
		winogradInputLast(t.b.vec, v, winoStride(g.c*ld), x, n, g.c, g.h, g.wd, p.PadH, p.PadW, out, &s.wino)
		winogradOutputGradLast(t.b.vec, m, winoStride(g.f*ld), dy, n, g.f, g.oh, g.ow, out, &s.wino)
		t.winogradProducts(worker, 16, g.f, g.c, ld, gemm.Matrix{Data: m, Stride: g.f, Trans: true}, gemm.Matrix{Data: v, Stride: g.c}, nil, nil, du, true)
	}
	dw := grow(&s.dw, g.f*g.ckk)
	clear(dw)
	winogradWeightGrad(dw, du, g.f, g.c)
}

// addBiasGrad adds one image's output gradient dyn [F, OH·OW], summed
// over positions, to s's bias gradient.
func (t *convTask) addBiasGrad(s *scratch, dyn []float32) {
	addRowSums(s.db[:t.g.f], dyn, t.g.ohw, t.g.ohw)
}
