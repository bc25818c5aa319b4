package gpu

import (
	"fmt"

	"github.com/gorun/gorun/cuda"
	"github.com/gorun/gorun/model/tensor"
)

// Autocast (Options.Autocast): a product's float32 operands are rounded
// into 16-bit scratch (the convolutions' transposed to channels-last on
// the way), cuBLAS or cuDNN multiplies them on the tensor cores with
// float32 accumulation, and the 16-bit result is widened back into the
// float32 tensor (transposed back for convolutions). The numbers are
// those of package amp's CPU emulation up to summation order: the parity
// tests compare the two.

// The rounding kinds the kernels take (kernels.cu's BF16, FP16 and
// NO_ROUNDING).
const (
	kindBF16   = 0
	kindFP16   = 1
	noRounding = -1
)

// Autocast returns the format products and convolutions autocast to,
// "bf16" or "fp16", or "" for none.
func (b *Backend) Autocast() string {
	if b.half == cuda.Float32 {
		return ""
	}
	return b.half.String()
}

// kind is the kernels' name for the autocast format.
func (b *Backend) kind() int {
	if b.half == cuda.Half {
		return kindFP16
	}
	return kindBF16
}

// halfScratch returns s sized for n 16-bit elements (0 after a failure).
func halfScratch(s *scratch, n int) cuda.DevPtr { return s.get(2 * n) }

// toHalfNHWC queues dst = t rounded to 16 bits and transposed from
// [n, c, hw…] to [n, hw…, c].
func (b *Backend) toHalfNHWC(t *tensor.Tensor, dst cuda.DevPtr) {
	n, c, hw := tensor.Planes(t)
	b.a().Ptr(b.ptr(t)).Ptr(dst).Int(c).Int(hw).Int(b.kind())
	if g, ok := b.tiles(n, c, hw); ok {
		b.launch(b.k.toHalfNHWC, g, threads, 0)
	}
}

// fromHalfNHWC queues t = beta·t + src widened and transposed from
// [n, hw…, c] to [n, c, hw…], with bias (nil: none) added as amp adds
// it.
func (b *Backend) fromHalfNHWC(src cuda.DevPtr, t, bias *tensor.Tensor, beta float32) {
	n, c, hw := tensor.Planes(t)
	b.a().Ptr(src).Ptr(b.ptr(t)).Ptr(b.ptr(bias)).Float(beta).Int(c).Int(hw).Int(b.kind())
	if g, ok := b.tiles(n, c, hw); ok {
		b.launch(b.k.fromHalfNHWC, g, threads, 0)
	}
}

// maxGridYZ bounds a grid's second and third dimensions (CUDA's limit).
const maxGridYZ = 65535

// tiles is the grid of the transposing kernels: 32×32 tiles of each of n
// planes [c, hw]; false (and the backend failed) beyond CUDA's limits.
func (b *Backend) tiles(n, c, hw int) (cuda.Dim3, bool) {
	g := cuda.Dim3{X: (hw + 31) / 32, Y: (c + 31) / 32, Z: n}
	if g.Y > maxGridYZ || g.Z > maxGridYZ {
		b.fail(fmt.Errorf("autocast: %d planes of %d channels exceed the transposing kernels' grid (at most %d of each per 32 channels)", n, c, maxGridYZ))
		return g, false
	}
	return g, true
}

// conv2dHalf is Conv2d under autocast: x and w rounded into channels-last
// 16-bit scratch, cuDNN's 16-bit convolution, and the output widened back
// into y with the rounded bias added and the sum rounded.
func (b *Backend) conv2dHalf(x, w, bias, y *tensor.Tensor, p tensor.ConvParams) {
	hx, hw, hy := halfScratch(&b.hx, x.Len()), halfScratch(&b.hw, w.Len()), halfScratch(&b.hy, y.Len())
	if hx == 0 || hw == 0 || hy == 0 {
		return
	}
	c, ws := b.plan(x, w, y, p)
	if c == nil {
		return
	}
	b.toHalfNHWC(x, hx)
	b.toHalfNHWC(w, hw)
	if b.enter() {
		b.fail(c.Forward(hx, hw, hy, ws))
		b.dv.Leave()
	}
	b.fromHalfNHWC(hy, y, bias, 0)
}

// conv2dBackwardHalf is Conv2dBackward under autocast: from the rounded
// input, weights and output gradient, the input gradient rounded (dx
// overwritten), the weight gradient rounded and added to dw, and the bias
// gradient (the sum of dy's rounded values, rounded) added to db.
func (b *Backend) conv2dBackwardHalf(x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams) {
	hx, hw, hy := halfScratch(&b.hx, x.Len()), halfScratch(&b.hw, w.Len()), halfScratch(&b.hy, dy.Len())
	hd := halfScratch(&b.hd, max(x.Len(), w.Len()))
	if hx == 0 || hw == 0 || hy == 0 || hd == 0 {
		return
	}
	c, ws := b.plan(x, w, dy, p)
	if c == nil {
		return
	}
	b.toHalfNHWC(dy, hy)
	if dw != nil {
		b.toHalfNHWC(x, hx)
		if b.enter() {
			b.fail(c.BackwardFilter(hx, hy, hd, ws, 0))
			b.dv.Leave()
		}
		b.fromHalfNHWC(hd, dw, nil, 1)
	}
	if dx != nil {
		b.toHalfNHWC(w, hw)
		if b.enter() {
			b.fail(c.BackwardData(hw, hy, hd, ws))
			b.dv.Leave()
		}
		b.fromHalfNHWC(hd, dx, nil, 0)
	}
	if db != nil {
		b.biasGrad(dy, db, b.kind())
	}
}

// matMulHalf is MatMul under autocast: a and b rounded into 16-bit
// scratch, cublasGemmEx with float32 accumulation, and the product
// rounded — in place when beta is 0, else added to beta·c.
func (b *Backend) matMulHalf(a *tensor.Tensor, transA bool, bm *tensor.Tensor, transB bool, c *tensor.Tensor, alpha, beta float32) {
	m, n, k := tensor.MatMulDims(a, transA, bm, transB)
	ha, hb := halfScratch(&b.hx, a.Len()), halfScratch(&b.hw, bm.Len())
	prod := b.ptr(c)
	if beta != 0 {
		prod = b.tmp.get(4 * c.Len())
	}
	if ha == 0 || hb == 0 || prod == 0 {
		return
	}
	b.a().Ptr(b.ptr(a)).Ptr(ha).Int(a.Len()).Int(b.kind())
	b.each(b.k.toHalf, a.Len())
	b.a().Ptr(b.ptr(bm)).Ptr(hb).Int(bm.Len()).Int(b.kind())
	b.each(b.k.toHalf, bm.Len())
	if b.enter() {
		b.fail(b.blas.GEMMHalf(b.half, transA, transB, m, n, k, alpha, ha, a.Shape[1], hb, bm.Shape[1], 0, prod, c.Shape[1]))
		b.dv.Leave()
	}
	b.a().Ptr(b.ptr(c)).Ptr(prod).Float(beta).Int(c.Len()).Int(b.kind())
	b.each(b.k.addRounded, c.Len())
}
