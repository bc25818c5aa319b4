package cpu

import (
	"math"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// Convolution is im2col + GEMM per image, or Winograd for 3×3 stride-1
// layers (winograd.go). The images of a batch are split
// into one contiguous chunk per thread; each chunk has its own column buffer
// and its own weight-gradient partial sums, which are added in chunk order
// afterwards, so results do not depend on thread scheduling.

type convTask struct {
	b          *Backend
	backward   bool
	x, w, bias *tensor.Tensor
	y          *tensor.Tensor
	dy, dx     *tensor.Tensor
	p          tensor.ConvParams
	g          geometry
	n, per     int  // images, images per chunk
	biasGrad   bool // backward: the bias gradient is wanted (db not nil)
	weightGrad bool // backward: the weight gradient is wanted (dw not nil)
	serialGEMM bool
	winograd   bool      // Winograd F(2×2, 3×3) instead of im2col (winograd.go)
	norm       *convNorm // forward: a batch norm applied to each image's output (Conv2dBatchNorm)
}

// convNorm is an evaluation-mode batch norm fused into a convolution: each
// output channel f becomes y·scale[f] + shift[f], through a relu when set.
type convNorm struct {
	scale, shift []float32
	relu         bool
}

// geometry of one convolution.
type geometry struct {
	c, h, wd, f, oh, ow, ckk, ohw int
}

func geom(x, w *tensor.Tensor, p tensor.ConvParams) geometry {
	g := geometry{c: x.Shape[1], h: x.Shape[2], wd: x.Shape[3], f: w.Shape[0]}
	g.oh, g.ow = p.OutSize(g.h, g.wd)
	g.ckk = g.c * p.KernelH * p.KernelW
	g.ohw = g.oh * g.ow
	return g
}

// pointwise reports a 1×1, stride-1, unpadded convolution, whose column
// matrix is the image itself.
func pointwise(p tensor.ConvParams) bool {
	return p.KernelH == 1 && p.KernelW == 1 && p.StrideH == 1 && p.StrideW == 1 && p.PadH == 0 && p.PadW == 0
}

// Conv2d implements tensor.Backend.
func (b *Backend) Conv2d(x, w, bias, y *tensor.Tensor, p tensor.ConvParams) {
	b.runConv(false, x, w, bias, y, nil, nil, p, false, false, nil)
}

// Conv2dBatchNorm implements tensor.ConvBatchNormBackend: each image's
// output planes go through the batch norm's evaluation-mode affine map
// (and relu) right after the image's product, with BatchNorm's scale,
// shift and row kernels, so the bits are those of the two layers.
func (b *Backend) Conv2dBatchNorm(x, w, bias, y, gamma, beta, runMean, runVar *tensor.Tensor, p tensor.ConvParams, bn tensor.BatchNormParams, relu bool) {
	c := y.Shape[1]
	norm := &b.convNorm
	norm.scale, norm.shift, norm.relu = grow(&norm.scale, c), grow(&norm.shift, c), relu
	for ch := range c {
		invStd := float32(1 / math.Sqrt(float64(runVar.Data[ch])+float64(bn.Eps)))
		norm.scale[ch], norm.shift[ch] = evalAffine(invStd, gamma.Data[ch], beta.Data[ch], runMean.Data[ch])
	}
	b.runConv(false, x, w, bias, y, nil, nil, p, false, false, norm)
}

// normalise applies the task's fused batch norm, if any, to one image's
// output planes.
func (t *convTask) normalise(y []float32) {
	if t.norm == nil {
		return
	}
	hw := t.g.ohw
	for f, scale := range t.norm.scale {
		row := y[f*hw : (f+1)*hw]
		t.norm.apply(t.b.vec, row, row, scale, t.norm.shift[f])
	}
}

// apply sets y to x·scale + shift, through the relu when the norm has
// one: batch norm's normalising row kernels.
func (n *convNorm) apply(vec vecOps, y, x []float32, scale, shift float32) {
	if n.relu {
		vec.affineReLU(y, x, scale, shift)
		return
	}
	vec.affine(y, x, scale, shift)
}

// Conv2dBackward implements tensor.Backend.
func (b *Backend) Conv2dBackward(x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams) {
	if dw == nil && dx == nil && db == nil {
		return
	}
	chunks := b.runConv(true, x, w, nil, nil, dy, dx, p, db != nil, dw != nil, nil)
	g := b.conv.g
	for i := 0; i < chunks; i++ {
		s := &b.chunks[i]
		if dw != nil {
			for j, v := range s.dw[:g.f*g.ckk] {
				dw.Data[j] += v
			}
		}
		if db != nil {
			for j, v := range s.db[:g.f] {
				db.Data[j] += v
			}
		}
	}
}

func (b *Backend) runConv(backward bool, x, w, bias, y, dy, dx *tensor.Tensor, p tensor.ConvParams, biasGrad, weightGrad bool, norm *convNorm) int {
	n := x.Shape[0]
	threads := b.pool.Threads()
	t := &b.conv
	*t = convTask{b: b, backward: backward, x: x, w: w, bias: bias, y: y, dy: dy, dx: dx, p: p, g: geom(x, w, p), n: n, biasGrad: biasGrad, weightGrad: weightGrad, norm: norm}
	if t.winograd = b.useWinograd(t.g, p); t.winograd && (!backward || dx != nil) {
		// Forward: U [16][F][C]; backward: the data gradient's U [16][C][F].
		// On the calling goroutine, before the chunks: chunk 0's rows are free.
		winogradWeights(b.vec, grow(&b.winoU, 16*winoStride(t.g.f*t.g.c)), w.Data, t.g.f, t.g.c, backward, &b.chunks[0].wino)
	}
	if n < threads {
		// Too few images to go round: one chunk, multi-threaded GEMMs.
		t.per = n
		t.Do(0, 0)
		return 1
	}
	t.serialGEMM = true
	t.per = ceilDiv(n, threads)
	chunks := ceilDiv(n, t.per)
	b.pool.Run(chunks, t)
	return chunks
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (t *convTask) gemm(worker, m, n, k int, a, bm gemm.Matrix, beta float32, c gemm.Matrix) {
	if t.serialGEMM {
		must(t.b.gemm.SgemmSerial(worker, m, n, k, 1, a, bm, beta, c))
		return
	}
	must(t.b.gemm.Sgemm(m, n, k, 1, a, bm, beta, c))
}

// groupColumns is the number of output positions a GEMM should see at
// least: small feature maps (8×8 in CIFARNet's last layers) are batched
// several images to a GEMM, so the weights are packed once per group
// rather than once per image.
const groupColumns = 512

// Do runs chunk i of the batch on worker: groups of images, each one
// im2col into a shared column matrix (row stride ld = images·OH·OW) and
// one GEMM per product.
func (t *convTask) Do(worker, i int) {
	if t.winograd {
		t.winogradChunk(worker, i)
		return
	}
	g := t.g
	s := &t.b.chunks[i]
	lo, hi := i*t.per, min((i+1)*t.per, t.n)
	group := max(1, min(hi-lo, groupColumns/g.ohw))
	direct := pointwise(t.p) && group == 1
	// The column matrix serves the forward pass and the weight gradient.
	columns := !t.backward || t.weightGrad
	var col, dcol, ybuf []float32
	if !direct && columns {
		col = grow(&s.col, g.ckk*group*g.ohw)
	}
	if group > 1 {
		ybuf = grow(&s.ybuf, g.f*group*g.ohw)
	}
	wm := gemm.Matrix{Data: t.w.Data, Stride: g.ckk}
	if t.backward {
		clear(grow(&s.dw, g.f*g.ckk))
		clear(grow(&s.db, g.f))
		if !direct && t.dx != nil {
			dcol = grow(&s.dcol, g.ckk*group*g.ohw)
		}
	}
	inLen, outLen := g.c*g.h*g.wd, g.f*g.ohw
	for first := lo; first < hi; first += group {
		n := min(group, hi-first)
		ld := n * g.ohw // row stride of col, dcol and ybuf
		switch {
		case !columns:
		case direct:
			col = t.x.Data[first*inLen : (first+1)*inLen]
		default:
			for k := range n {
				im2col(t.b.vec, t.x.Data[(first+k)*inLen:(first+k+1)*inLen], col[k*g.ohw:], ld, g, t.p)
			}
		}
		colM := gemm.Matrix{Data: col, Stride: ld}
		if !t.backward {
			if n == 1 {
				yn := t.y.Data[first*outLen : (first+1)*outLen]
				t.gemm(worker, g.f, g.ohw, g.ckk, wm, colM, 0, gemm.Matrix{Data: yn, Stride: g.ohw})
				t.addBias(yn, g.ohw)
				t.normalise(yn)
				continue
			}
			t.gemm(worker, g.f, ld, g.ckk, wm, colM, 0, gemm.Matrix{Data: ybuf, Stride: ld})
			for k := range n {
				yn := t.y.Data[(first+k)*outLen : (first+k+1)*outLen]
				if t.norm != nil && t.bias == nil {
					// The batch norm's pass is the copy.
					for f, scale := range t.norm.scale {
						t.norm.apply(t.b.vec, yn[f*g.ohw:(f+1)*g.ohw], ybuf[f*ld+k*g.ohw:f*ld+(k+1)*g.ohw], scale, t.norm.shift[f])
					}
					continue
				}
				for f := 0; f < g.f; f++ {
					copy(yn[f*g.ohw:(f+1)*g.ohw], ybuf[f*ld+k*g.ohw:])
				}
				t.addBias(yn, g.ohw)
				t.normalise(yn)
			}
			continue
		}
		// The group's output gradient as one [F, ld] matrix.
		var dyM gemm.Matrix
		if n == 1 {
			dyM = gemm.Matrix{Data: t.dy.Data[first*outLen : (first+1)*outLen], Stride: g.ohw}
		} else {
			for k := range n {
				dyn := t.dy.Data[(first+k)*outLen : (first+k+1)*outLen]
				for f := 0; f < g.f; f++ {
					copy(ybuf[f*ld+k*g.ohw:f*ld+(k+1)*g.ohw], dyn[f*g.ohw:(f+1)*g.ohw])
				}
			}
			dyM = gemm.Matrix{Data: ybuf, Stride: ld}
		}
		if t.weightGrad { // dW += dy · colᵀ
			t.gemm(worker, g.f, g.ckk, ld, dyM, gemm.Matrix{Data: col, Stride: ld, Trans: true}, 1, gemm.Matrix{Data: s.dw, Stride: g.ckk})
		}
		for f := 0; t.biasGrad && f < g.f; f++ {
			var sum float32
			for _, v := range dyM.Data[f*ld : f*ld+ld] {
				sum += v
			}
			s.db[f] += sum
		}
		if t.dx == nil {
			continue
		}
		wT := gemm.Matrix{Data: t.w.Data, Stride: g.ckk, Trans: true}
		if direct {
			dxn := t.dx.Data[first*inLen : (first+1)*inLen]
			t.gemm(worker, g.ckk, g.ohw, g.f, wT, dyM, 0, gemm.Matrix{Data: dxn, Stride: g.ohw})
			continue
		}
		// dcol = Wᵀ · dy, folded back into each image.
		t.gemm(worker, g.ckk, ld, g.f, wT, dyM, 0, gemm.Matrix{Data: dcol, Stride: ld})
		for k := range n {
			col2im(t.b.vec, dcol[k*g.ohw:], ld, t.dx.Data[(first+k)*inLen:(first+k+1)*inLen], g, t.p)
		}
	}
}

// addBias adds the bias to each of the F rows (of length hw) of y.
func (t *convTask) addBias(y []float32, hw int) {
	if t.bias == nil {
		return
	}
	for f, v := range t.bias.Data {
		row := y[f*hw : (f+1)*hw]
		for j := range row {
			row[j] += v
		}
	}
}

// im2col lays out the receptive fields of one image [C, H, W] as the
// columns of col [C·KH·KW, OH·OW] (row stride ld), zero where they
// overhang the padding.
func im2col(ops vecOps, x, col []float32, ld int, g geometry, p tensor.ConvParams) {
	r := 0
	for c := 0; c < g.c; c++ {
		plane := x[c*g.h*g.wd : (c+1)*g.h*g.wd]
		for kh := 0; kh < p.KernelH; kh++ {
			for kw := 0; kw < p.KernelW; kw++ {
				out := col[r*ld : r*ld+g.ohw]
				r++
				// iw = ow·StrideW − PadW + kw: each row a strided (or, at
				// stride 1, shifted) copy of the image row's [lo, hi), zeros
				// around; the same [lo, hi) for every row.
				lo, hi := inside(g.ow, g.wd, p.StrideW, kw-p.PadW)
				for oh := 0; oh < g.oh; oh++ {
					dst := out[oh*g.ow : (oh+1)*g.ow]
					ih := oh*p.StrideH - p.PadH + kh
					if ih < 0 || ih >= g.h {
						clear(dst)
						continue
					}
					src := plane[ih*g.wd : (ih+1)*g.wd]
					clear(dst[:lo])
					clear(dst[hi:])
					if p.StrideW == 1 {
						copy(dst[lo:hi], src[lo+kw-p.PadW:])
						continue
					}
					at := lo*p.StrideW - p.PadW + kw
					if p.StrideW == 2 {
						ops.gather2(dst[lo:hi], src[at:])
						continue
					}
					for ow := lo; ow < hi; ow++ {
						dst[ow] = src[at]
						at += p.StrideW
					}
				}
			}
		}
	}
}

// col2im sets dx [C, H, W] to the sum of the column gradients (col, row
// stride ld) over every receptive field each pixel belongs to.
func col2im(ops vecOps, col []float32, ld int, dx []float32, g geometry, p tensor.ConvParams) {
	clear(dx)
	r := 0
	for c := 0; c < g.c; c++ {
		plane := dx[c*g.h*g.wd : (c+1)*g.h*g.wd]
		for kh := 0; kh < p.KernelH; kh++ {
			for kw := 0; kw < p.KernelW; kw++ {
				in := col[r*ld : r*ld+g.ohw]
				r++
				for oh := 0; oh < g.oh; oh++ {
					ih := oh*p.StrideH - p.PadH + kh
					if ih < 0 || ih >= g.h {
						continue
					}
					src := in[oh*g.ow : (oh+1)*g.ow]
					dst := plane[ih*g.wd : (ih+1)*g.wd]
					// iw = ow·StrideW − PadW + kw: a strided (or shifted)
					// add of the row's [lo, hi).
					lo, hi := inside(g.ow, g.wd, p.StrideW, kw-p.PadW)
					if p.StrideW == 1 {
						d := dst[lo+kw-p.PadW:][:hi-lo]
						ops.add(d, d, src[lo:hi])
						continue
					}
					at := lo*p.StrideW - p.PadW + kw
					for _, v := range src[lo:hi] {
						dst[at] += v
						at += p.StrideW
					}
				}
			}
		}
	}
}

// inside returns the range [lo, hi) of the out output positions o whose
// input position o·stride + offset lies in [0, in): lo = hi when none
// does.
func inside(out, in, stride, offset int) (lo, hi int) {
	lo = 0
	if offset < 0 {
		lo = ceilDiv(-offset, stride)
	}
	hi = out
	if last := in - 1 - offset; last < 0 {
		hi = 0
	} else {
		hi = min(out, last/stride+1)
	}
	lo = min(lo, hi)
	return lo, hi
}
