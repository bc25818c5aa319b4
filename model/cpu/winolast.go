package cpu

// Winograd's transforms with the channels innermost, for the smallest
// feature maps. winogradInput, winogradOutput and winogradOutputGrad run
// each step over one channel's tiles at once: a vector kernel call per
// tile row and channel, which on ResNet-18's 4×4 maps (CIFAR-10) is two
// tiles long, so that the transforms cost twice the products they feed.
// Here each image is first laid out with its channels innermost
// ([H][W][C]), and each step runs over all the channels of one tile at
// once: as many calls, each C values long. The products then multiply
// tiles × channels matrices (V̂[ξ]·Uᵀ forward, M̂[ξ]ᵀ·V̂[ξ] for the weight
// gradient); the adds are the same, in the same order, and so are the
// products' sums, so both layouts give the same bits
// (TestWinogradChannelsLast).

// winoLastMaxTileCols is the widest output, in 2×2 tiles, whose Winograd
// transforms run channels innermost with the AVX2 kernels, and for a
// prepared layer's kept weights. BenchmarkWinogradLayouts, one thread,
// batch 32 (Zen 4, AVX2 kernels): 4×4 maps, 128 channels, 1.36× forward
// and 1.39× forward + backward; 8×8 maps level within the noise
// (0.9–1.12×: the layout's two transposes cost what the longer calls
// save), 16×16 ones 0.8×.
const winoLastMaxTileCols = 2

// winoLastMaxTileColsWide and winoLastMaxKernelsWide widen the choice
// with the AVX-512 kernels, for the calls whose transformed weights are
// not kept (training's), to maps up to 7 tiles wide of layers up to
// 256 × 256 kernels (F·C). BenchmarkWinogradLayouts (Intel Xeon family 6
// model 207, 2026-12-02; bench/results/current/wino-layouts-2026-12-02-intel.txt),
// channels last ÷ planes, medians of three, forward and forward +
// backward: 8×8 maps, 64 → 64 channels, 1.61× and 1.51×; 128 → 256,
// 1.17× and 1.32×; 14×14, 256 → 256, 1.02× and 1.01× (1.02× and 1.13×
// in bench/resnet50_convs.sh's alternated rounds); 16×16 (8 tiles wide),
// 64 → 128, 0.89× and 0.93×. Layers with more kernels came out mixed,
// and stay by planes: 7×7, 512 → 512, 0.92× and 1.04× (0.96× and 0.91×
// alternated); 8×8, 256 → 512, 1.12× and 1.13× here but 0.95× forward +
// backward in an earlier run of the benchmark the same hour.
const (
	winoLastMaxTileColsWide = 7
	winoLastMaxKernelsWide  = 256 * 256
)

// winoLayout is how the Winograd transforms lay out their operands.
type winoLayout int8

const (
	winoLayoutAuto   winoLayout = iota // channelsLast decides
	winoPlanes                         // a channel's tiles at once (winogradInput)
	winoChannelsLast                   // a tile's channels at once (winogradInputLast)
)

// channelsLast reports whether a convolution whose output (forward) or
// input (data gradient) is tiled as s runs its Winograd transforms with
// the channels innermost: with the vector kernels (whose calls the plane
// layout makes too short there), on maps at most winoLastMaxTileCols
// tiles wide, or winoLastMaxTileColsWide for layers of at most
// winoLastMaxKernelsWide kernels (F·C) with the AVX-512 kernels where the
// call's weights are not kept (kept: a prepared layer's forward, its
// transformed weights kept and packed for the layout chosen here).
func (b *Backend) channelsLast(s winoShape, kernels int, kept bool) bool {
	switch b.winoLayout {
	case winoPlanes:
		return false
	case winoChannelsLast:
		return true
	}
	if !b.vec.vector {
		return false
	}
	if b.vec.wide && !kept && kernels <= winoLastMaxKernelsWide {
		return s.tw <= winoLastMaxTileColsWide
	}
	return s.tw <= winoLastMaxTileCols
}

// channelsLast is the backend's layout choice for this call's layer
// (its F·C kernels) and weights (kept or not), tiled as s.
func (t *convTask) channelsLast(s winoShape) bool {
	return t.b.channelsLast(s, t.g.f*t.g.c, t.keptU)
}

// winogradInputLast writes Bᵀ d B of every 4×4 input tile of images
// images x [images][C, H, W] into v with the channels innermost: element
// ξ of tile t of image k, channel ch at v[ξ·es + (k·tiles + t)·C + ch].
// Tile (i, j) starts at row 2i − padH, column 2j − padW; what lies
// outside the image is zero.
func winogradInputLast(ops vecOps, v []float32, es int, x []float32, images, c, h, w, padH, padW int, s winoShape, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	pw, hp := 2*tw+2, 2*th+2 // the padded width and height the tiles span
	buf := work.get((hp*pw + 16) * c)
	// padded: an image, [hp][pw][C], zero outside it (only the image's
	// part is written); t: d B of a tile's four rows, [4][4][C].
	padded, t := buf[:hp*pw*c], buf[hp*pw*c:]
	at := func(d []float32, i int) []float32 { return d[i*c : (i+1)*c] }
	for k := range images {
		padChannelsLast(ops, padded, x[k*c*h*w:(k+1)*c*h*w], c, h, w, padH, padW, hp, pw)
		for i := range th {
			for j := range tw {
				for r := range 4 {
					p := (2*i+r)*pw + 2*j // the tile row's first pixel
					ops.bt4(at(t, 4*r), at(t, 4*r+1), at(t, 4*r+2), at(t, 4*r+3), at(padded, p), at(padded, p+1), at(padded, p+2), at(padded, p+3))
				}
				o := (k*tiles + i*tw + j) * c
				for q := range 4 {
					ops.bt4(v[q*es+o:][:c], v[(4+q)*es+o:][:c], v[(8+q)*es+o:][:c], v[(12+q)*es+o:][:c], at(t, q), at(t, 4+q), at(t, 8+q), at(t, 12+q))
				}
			}
		}
	}
}

// padChannelsLast lays out the image img [C, H, W] channels innermost in
// padded [hp][pw][C] at row padH, column padW: what the padded plane
// cuts off is left out, what lies around the image is left as it is (the
// callers' zeros).
func padChannelsLast(ops vecOps, padded, img []float32, c, h, w, padH, padW, hp, pw int) {
	y0, y1 := max(0, -padH), min(h, hp-padH)
	x0, x1 := max(0, -padW), min(w, pw-padW)
	for iy := y0; iy < y1; iy++ {
		// Row iy of every channel into padded row iy + padH.
		channelsInnermost(ops, padded[((iy+padH)*pw+padW+x0)*c:], img[iy*w+x0:], h*w, c, x1-x0)
	}
}

// winogradOutputLast sets images images' outputs y [images][F, OH, OW]
// from the products m laid out channels innermost (element ξ of tile t
// of image k, filter o at m[ξ·es + (k·tiles + t)·F + o]) as Aᵀ m A, plus
// the bias when there is one; the part of a tile past an odd edge is
// dropped. Each image's outputs are made [OH][OW][F], then put in place.
func winogradOutputLast(ops vecOps, y, m []float32, es, images, f, oh, ow int, s winoShape, bias []float32, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	pw := 2 * tw // the output's width in whole tiles
	buf := work.get((2*th*pw + 8) * f)
	// out: an image's outputs, [2·th][2·tw][F]; c: Aᵀ m, [2][4][F].
	out, c := buf[:2*th*pw*f], buf[2*th*pw*f:]
	at := func(d []float32, i int) []float32 { return d[i*f : (i+1)*f] }
	for k := range images {
		for i := range th {
			for j := range tw {
				o := (k*tiles + i*tw + j) * f
				for q := range 4 {
					ops.at2(at(c, q), at(c, 4+q), m[q*es+o:][:f], m[(4+q)*es+o:][:f], m[(8+q)*es+o:][:f], m[(12+q)*es+o:][:f])
				}
				for r := range 2 {
					p := (2*i+r)*pw + 2*j
					ops.at2(at(out, p), at(out, p+1), at(c, 4*r), at(c, 4*r+1), at(c, 4*r+2), at(c, 4*r+3))
				}
			}
		}
		outputsInPlace(ops, y[k*f*oh*ow:(k+1)*f*oh*ow], out, f, oh, ow, pw, bias)
	}
}

// outputsInPlace sets an image's outputs yk [F, OH, OW] from out, laid
// out [OH][pw][F] (rows of whole tiles, cut to OW), plus the bias when
// there is one.
func outputsInPlace(ops vecOps, yk, out []float32, f, oh, ow, pw int, bias []float32) {
	if ow == pw { // the whole image at once: its rows lie end to end in out
		channelsOutermost(ops, yk, oh*ow, out, f, oh*ow, bias)
		return
	}
	for oy := range oh {
		channelsOutermost(ops, yk[oy*ow:], oh*ow, out[oy*pw*f:], f, ow, bias)
	}
}

// winogradOutputGradLast writes A dY Aᵀ of every 2×2 block of images
// images' output gradients dy [images][F, OH, OW] into m with the
// channels innermost, as winogradOutputLast reads it (zero past an odd
// edge).
func winogradOutputGradLast(ops vecOps, m []float32, es int, dy []float32, images, f, oh, ow int, s winoShape, work *winoRows) {
	th, tw, tiles := s.th, s.tw, s.tiles
	pw := 2 * tw
	buf := work.get((2*th*pw + 8) * f)
	// plane: an image's gradient, [2·th][2·tw][F], zero past its edges;
	// h: dY Aᵀ of a tile's two rows, [2][4][F].
	plane, h := buf[:2*th*pw*f], buf[2*th*pw*f:]
	at := func(d []float32, i int) []float32 { return d[i*f : (i+1)*f] }
	for k := range images {
		img := dy[k*f*oh*ow : (k+1)*f*oh*ow]
		for oy := range oh {
			channelsInnermost(ops, plane[oy*pw*f:], img[oy*ow:], oh*ow, f, ow)
		}
		for i := range th {
			for j := range tw {
				for r := range 2 {
					p := (2*i+r)*pw + 2*j
					ops.a4(at(h, 4*r), at(h, 4*r+1), at(h, 4*r+2), at(h, 4*r+3), at(plane, p), at(plane, p+1))
				}
				o := (k*tiles + i*tw + j) * f
				for q := range 4 {
					ops.a4(m[q*es+o:][:f], m[(4+q)*es+o:][:f], m[(8+q)*es+o:][:f], m[(12+q)*es+o:][:f], at(h, q), at(h, 4+q))
				}
			}
		}
	}
}

// channelsInnermost copies n pixels of c channels, src[ch·stride + i],
// to dst[i·c + ch]: a row of an image into a row laid out channels
// innermost. With the vector kernels, blocks of 8 channels × 8 pixels
// are transposed in registers (vecOps.transposeBlocks); the rest goes
// four channels at a time, so that each store of a pixel's four values
// is one 16-byte run.
func channelsInnermost(ops vecOps, dst, src []float32, stride, c, n int) {
	if n == 0 {
		return
	}
	done, blocks := 0, 0 // channels [0, done) have their first 8·blocks pixels
	if ops.vector && n >= 8 {
		for blocks = n / 8; done+8 <= c; done += 8 {
			ops.transposeBlocks(dst[done:], c, 8*c, src[done*stride:], stride, 8, blocks, nil)
		}
	}
	innermostLoop(dst, src, stride, c, 0, done, 8*blocks, n)
	innermostLoop(dst, src, stride, c, done, c, 0, n)
}

// innermostLoop is channelsInnermost over channels [lo, hi) and pixels
// [from, n), without vector kernels.
func innermostLoop(dst, src []float32, stride, c, lo, hi, from, n int) {
	if from >= n {
		return
	}
	ch := lo
	for ; ch+4 <= hi; ch += 4 {
		s0 := src[ch*stride+from : ch*stride+n]
		s1 := src[(ch+1)*stride+from : (ch+1)*stride+n]
		s2 := src[(ch+2)*stride+from : (ch+2)*stride+n]
		s3 := src[(ch+3)*stride+from : (ch+3)*stride+n]
		for i, v := range s0 {
			at := (from+i)*c + ch
			d := dst[at : at+4 : at+4]
			d[0], d[1], d[2], d[3] = v, s1[i], s2[i], s3[i]
		}
	}
	for ; ch < hi; ch++ {
		for i, v := range src[ch*stride+from : ch*stride+n] {
			dst[(from+i)*c+ch] = v
		}
	}
}

// channelsOutermost is channelsInnermost's inverse with a bias: n pixels
// of c channels, src[i·c + ch], to dst[ch·stride + i], plus bias[ch]
// (0 when bias is nil: −0 becomes +0, in both forms).
func channelsOutermost(ops vecOps, dst []float32, stride int, src []float32, c, n int, bias []float32) {
	if n == 0 {
		return
	}
	done, blocks := 0, 0 // channels [0, done) have their first 8·blocks pixels
	if ops.vector && n >= 8 {
		var zeros [8]float32
		for blocks = n / 8; done+8 <= c; done += 8 {
			b := zeros[:]
			if bias != nil {
				b = bias[done : done+8]
			}
			ops.transposeBlocks(dst[done*stride:], stride, 8, src[done:], c, 8*c, blocks, b)
		}
	}
	outermostLoop(dst, stride, src, c, 0, done, 8*blocks, n, bias)
	outermostLoop(dst, stride, src, c, done, c, 0, n, bias)
}

// outermostLoop is channelsOutermost over channels [lo, hi) and pixels
// [from, n), without vector kernels.
func outermostLoop(dst []float32, stride int, src []float32, c, lo, hi, from, n int, bias []float32) {
	if from >= n {
		return
	}
	var b0, b1, b2, b3 float32
	ch := lo
	for ; ch+4 <= hi; ch += 4 {
		if bias != nil {
			b0, b1, b2, b3 = bias[ch], bias[ch+1], bias[ch+2], bias[ch+3]
		}
		d0 := dst[ch*stride+from : ch*stride+n]
		d1 := dst[(ch+1)*stride+from : (ch+1)*stride+n]
		d2 := dst[(ch+2)*stride+from : (ch+2)*stride+n]
		d3 := dst[(ch+3)*stride+from : (ch+3)*stride+n]
		for i := range d0 {
			at := (from+i)*c + ch
			s := src[at : at+4 : at+4]
			d0[i], d1[i], d2[i], d3[i] = s[0]+b0, s[1]+b1, s[2]+b2, s[3]+b3
		}
	}
	for ; ch < hi; ch++ {
		if bias != nil {
			b0 = bias[ch]
		}
		for i := range dst[ch*stride+from : ch*stride+n] {
			dst[ch*stride+from+i] = src[(from+i)*c+ch] + b0
		}
	}
}
