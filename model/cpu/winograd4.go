package cpu

import "github.com/gorun/gorun/model/gemm"

// Winograd F(4×4, 3×3) (Lavin and Gray, 2016; points 0, ±1, ±2 and ∞):
// each 4×4 block of outputs from a 6×6 input tile, Y = Aᵀ[(G g Gᵀ) ⊙
// (Bᵀ d B)]A. Over a batch the element-wise products become 36 matrix
// products of F·C multiply-adds a tile of 16 outputs: 2.25 an output
// where F(2×2, 3×3) takes 4 and im2col 9. Its transforms multiply by 4,
// 5, 2 and 8 (Bᵀ, Aᵀ) and by 1/4, 1/2 and 1/6 (G), so its rounding is
// larger: on CIFARNet's layers (unit inputs, kaiming weights) 1.8–2.4e-6
// of the outputs' RMS on average and 3e-5 at worst, against 2.6–3.6e-7
// and 2e-6 with 2×2 tiles (TestWinograd4Rounding; TestWinograd4 bounds
// it against the float64 definition on other shapes).
//
// It runs the forward pass of frozen layers (Conv2dPrepared: evaluation
// and inference), with the channels innermost (as winolast.go: each step
// over all the channels of one tile at once). Training keeps 2×2 tiles.
// With 4×4 ones in its forward pass and data gradient, CIFARNet's conv
// gradients agreed with PyTorch's within 5e-6–1.5e-5 (1–4e-6 with 2×2
// tiles), but the larger rounding flips more of the max pools' and
// relus' choices: two processes and one, whose batch norms sum in
// another order, drifted apart by 4e-5 in four steps (TestSyncBatchNorm,
// whose bound is 1e-5; 2×2 tiles: 6.5e-7).

// useWinograd4 reports whether a Winograd layer's forward pass runs
// with 4×4 tiles: a frozen layer's (prep set, not kept for a backward
// pass) with the vector kernels, up to wino4MaxKernels. Forward, one
// thread, batch 32 (BenchmarkWinogradTiles, Zen 4), against the 2×2
// tiles in the layout the backend chooses, by the medians of three
// runs: ResNet-18's layers on CIFAR-10's 4×4 and 8×8 maps 1.28× and
// 1.82× faster, CIFARNet's 1.33–1.42×, ResNet-50's 1.18–1.23× (56×56 to
// 14×14; 7×7, 512 channels, 1.55×).
func (b *Backend) useWinograd4(g geometry, prep *prepared) bool {
	switch b.winoTile {
	case 2:
		return false
	case 4:
		return true
	}
	return b.vec.vector && prep != nil && !prep.forBackward && g.f*g.c <= wino4MaxKernels
}

// wino4MaxKernels bounds the layers useWinograd4 takes, in kernels (F·C):
// CIFARNet's 256 → 512. U's 36 matrices take 144 bytes a kernel, 36 MiB
// for ResNet-50's 512 → 512 layers, which with 2×2 tiles (16 MiB) set
// the size of the backend's U; with 4×4 tiles ResNet-50's inference
// peaked 40 MiB higher (350–356 → 391–397 MiB, 0.49–0.50× PyTorch's)
// for 0–5% of its speed.
const wino4MaxKernels = 256 * 512

// wino4Tiling is the tiling of one image's output in 4×4 tiles.
func wino4Tiling(oh, ow int) winoShape {
	s := winoShape{th: (oh + 3) / 4, tw: (ow + 3) / 4}
	s.tiles = s.th * s.tw
	return s
}

// winoElems is the number of tile elements, and so of products, of
// Winograd with tiles of tile×tile outputs (2 or 4).
func winoElems(tile int) int {
	if tile == 4 {
		return 36
	}
	return 16
}

// winograd4Weights sets u [36][C][F] (matrices winoStride(F·C) apart) to
// G w Gᵀ of every 3×3 kernel of w [F, C, 3, 3] — each matrix transposed,
// as the channels-last products' B operands, so that the GEMM packs them
// by copying rows rather than transposing —, over blocks [first, last)
// of winoWeightBlock kernels (in u's order), so that threads can share
// the work (weightsTask): each block's nine elements spread into nine
// planes (spreadKernels), G applied down the columns of every kernel at
// once, then along the rows straight into u's matrices (vecOps.g6).
func winograd4Weights(ops vecOps, u, w []float32, f, c int, work *winoRows, first, last int) {
	n := f * c
	es := winoStride(n)
	const block, stride = winoWeightBlock, winoPlaneStride
	buf := grow(&work.buf, 27*stride)
	g, t := buf[:9*stride], buf[9*stride:27*stride] // g's nine planes; t = G g, [6][3]
	for lo := first * block; lo < min(n, last*block); lo += block {
		m := min(block, n-lo)
		gp := func(j int) []float32 { return g[j*stride : j*stride+m] }
		spreadKernels([9][]float32{gp(0), gp(1), gp(2), gp(3), gp(4), gp(5), gp(6), gp(7), gp(8)}, w, lo, c, f, true, false)
		for q := range 3 {
			ops.g6(t[q*stride:], 3*stride, g[q*stride:], 3*stride, m)
		}
		for r := range 6 {
			ops.g6(u[6*r*es+lo:], es, t[3*r*stride:], stride, m)
		}
	}
}

// winograd4InputLast writes Bᵀ d B of every 6×6 input tile of images
// images x [images][C, H, W] into v with the channels innermost: element
// ξ of tile t of image k, channel ch at v[ξ·es + (k·tiles + t)·C + ch].
// Tile (i, j) starts at row 4i − padH, column 4j − padW; what lies
// outside the image is zero.
func winograd4InputLast(ops vecOps, v []float32, es int, x []float32, images, c, h, w, padH, padW int, s winoShape, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	pw, hp := 4*tw+2, 4*th+2 // the padded width and height the tiles span
	buf := work.get((hp*pw + 36) * c)
	// padded: an image, [hp][pw][C], zero outside it (only the image's
	// part is written); t: d B of a tile's six rows, [6][6][C].
	padded, t := buf[:hp*pw*c], buf[hp*pw*c:]
	for k := range images {
		padChannelsLast(ops, padded, x[k*c*h*w:(k+1)*c*h*w], c, h, w, padH, padW, hp, pw)
		for i := range th {
			for j := range tw {
				for r := range 6 {
					ops.bt6(t[6*r*c:], c, padded[((4*i+r)*pw+4*j)*c:], c, c)
				}
				o := (k*tiles + i*tw + j) * c
				for q := range 6 {
					ops.bt6(v[q*es+o:], 6*es, t[q*c:], 6*c, c)
				}
			}
		}
	}
}

// winograd4OutputLast sets images images' outputs y [images][F, OH, OW]
// from the products m laid out channels innermost (element ξ of tile t
// of image k, filter o at m[ξ·es + (k·tiles + t)·F + o]) as Aᵀ m A, plus
// the bias when there is one; the part of a tile past the map's edge is
// dropped. Each image's outputs are made [OH][OW][F], then put in place.
func winograd4OutputLast(ops vecOps, y, m []float32, es, images, f, oh, ow int, s winoShape, bias []float32, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	pw := 4 * tw // the output's width in whole tiles
	buf := work.get((4*th*pw + 24) * f)
	// out: an image's outputs, [4·th][4·tw][F]; c: Aᵀ m, [4][6][F].
	out, c := buf[:4*th*pw*f], buf[4*th*pw*f:]
	for k := range images {
		for i := range th {
			for j := range tw {
				o := (k*tiles + i*tw + j) * f
				for q := range 6 {
					ops.at4(c[q*f:], 6*f, m[q*es+o:], 6*es, f)
				}
				for r := range 4 {
					ops.at4(out[((4*i+r)*pw+4*j)*f:], f, c[6*r*f:], f, f)
				}
			}
		}
		outputsInPlace(ops, y[k*f*oh*ow:(k+1)*f*oh*ow], out, f, oh, ow, pw, bias)
	}
}

// winograd4Forward runs the forward pass of chunk i's images [lo, hi) as
// F(4×4, 3×3), with the bias and the fused batch norm.
func (t *convTask) winograd4Forward(worker int, s *scratch, lo, hi int) {
	g, p := t.g, t.p
	var bias []float32
	if t.bias != nil {
		bias = t.bias.Data
	}
	inLen, outLen := g.c*g.h*g.wd, g.f*g.ohw
	t.winograd4Images(worker, s, t.x.Data[lo*inLen:hi*inLen], t.y.Data[lo*outLen:hi*outLen], hi-lo, g.c, g.h, g.wd, g.f, g.oh, g.ow, p.PadH, p.PadW, bias)
	for k := lo; k < hi; k++ {
		t.normalise(t.y.Data[k*outLen:(k+1)*outLen], k)
	}
}

// winograd4Images sets y [images][F, OH, OW] to the convolution of x
// [images][C, H, W] by t.u (U [36][C][F]) as F(4×4, 3×3), plus bias
// when not nil, in groups of images of at least winoGroupTiles tiles.
func (t *convTask) winograd4Images(worker int, s *scratch, x, y []float32, images, c, h, w, f, oh, ow, padH, padW int, bias []float32) {
	out := wino4Tiling(oh, ow)
	inLen, outLen := c*h*w, f*oh*ow
	group := max(1, min(images, ceilDiv(winoGroupTiles, out.tiles)))
	v := grow(&s.col, 36*winoStride(c*group*out.tiles))
	m := grow(&s.ybuf, 36*winoStride(f*group*out.tiles))
	for first := 0; first < images; first += group {
		n := min(group, images-first)
		ld := n * out.tiles
		winograd4InputLast(t.b.vec, v, winoStride(c*ld), x[first*inLen:(first+n)*inLen], n, c, h, w, padH, padW, out, &s.wino)
		t.winogradProducts(worker, 36, ld, f, c, gemm.Matrix{Data: v, Stride: c}, gemm.Matrix{Data: t.u, Stride: f}, nil, t.uPacked, m, false)
		winograd4OutputLast(t.b.vec, y[first*outLen:(first+n)*outLen], m, winoStride(f*ld), n, f, oh, ow, out, bias, &s.wino)
	}
}
