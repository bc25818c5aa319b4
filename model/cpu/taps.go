package cpu

import (
	"github.com/gorun/gorun/model/parallel"
	"github.com/gorun/gorun/model/tensor"
)

// Kernels larger than the map they slide over. On small feature maps some
// of a kernel's rows or columns meet only padding, whatever the output: a
// 3×3 kernel on a 1×L map (a sequence laid out as an image) reads the
// image with its middle row alone. Layers over maps no larger than their
// kernels run as dense products, which skip such taps anyway (dense.go);
// the others are run as the convolution with the live taps alone — a
// 1×3 kernel, unpadded along its height, in that example — instead of
// multiplying zeros. The result is the same sum less terms that are
// exactly zero; the dropped taps' weight gradients are zero.

// liveTaps returns the range [lo, hi) of a kernel dimension of k taps
// that meets the input for some output: tap t reads input index
// o·stride − pad + t for outputs o in [0, out). lo == hi when none does.
func liveTaps(in, out, k, stride, pad int) (lo, hi int) {
	live := func(t int) bool {
		o := ceilDiv(max(0, pad-t), stride) // the first output whose tap t is not in the leading padding
		return o < out && o*stride-pad+t < in
	}
	for lo = 0; lo < k && !live(lo); lo++ {
	}
	for hi = k; hi > lo && !live(hi-1); hi-- {
	}
	return lo, hi
}

// trimmedConv is a convolution run with its live taps alone: params p
// over the same input give the same output size, and tap (i, j) of its
// kernel is tap (h0+i, w0+j) of the layer's.
type trimmedConv struct {
	p      tensor.ConvParams
	h0, w0 int
}

// trim reports whether the convolution of x by a kernel of params p has
// taps that meet only padding, and the convolution without them.
func trim(x *tensor.Tensor, p tensor.ConvParams) (trimmedConv, bool) {
	h, w := x.Shape[2], x.Shape[3]
	oh, ow := p.OutSize(h, w)
	h0, h1 := liveTaps(h, oh, p.KernelH, p.StrideH, p.PadH)
	w0, w1 := liveTaps(w, ow, p.KernelW, p.StrideW, p.PadW)
	if h0 == h1 || w0 == w1 || (h1-h0 == p.KernelH && w1-w0 == p.KernelW) {
		return trimmedConv{}, false
	}
	t := trimmedConv{h0: h0, w0: w0, p: tensor.ConvParams{
		KernelH: h1 - h0, KernelW: w1 - w0,
		StrideH: p.StrideH, StrideW: p.StrideW,
		PadH: p.PadH - h0, PadW: p.PadW - w0,
	}}
	// Output o's tap h0+i reads index o·stride − pad + h0 + i, which is
	// tap i of the new kernel with padding pad − h0; the outputs must be
	// the same ones (the trailing padding is implied by the size).
	if toh, tow := t.p.OutSize(h, w); toh != oh || tow != ow || t.p.PadH < 0 || t.p.PadW < 0 {
		return trimmedConv{}, false
	}
	return t, true
}

// weights copies the live taps of w [F, C, KH, KW] into dst's storage, as
// a kernel [F, C, KH', KW'] of the trimmed convolution, its kernels split
// over the pool's threads when there are many (a strided gather, bound by
// memory).
func (t trimmedConv) weights(pool *parallel.Pool, task *tapsTask, dst **tensor.Tensor, w *tensor.Tensor) *tensor.Tensor {
	out := tensor.Reuse(dst, w.Shape[0], w.Shape[1], t.p.KernelH, t.p.KernelW)
	kernels := w.Shape[0] * w.Shape[1]
	parts := pool.Threads()
	if len(w.Data) < 1<<16 {
		parts = 1
	}
	*task = tapsTask{t: t, w: w, out: out, per: ceilDiv(kernels, parts)}
	pool.Run(ceilDiv(kernels, task.per), task)
	*task = tapsTask{}
	return out
}

// tapsTask copies the live taps of a range of kernels: part i of
// trimmedConv.weights.
type tapsTask struct {
	t      trimmedConv
	w, out *tensor.Tensor
	per    int // kernels a part
}

// Do implements parallel.Task.
func (g *tapsTask) Do(_, i int) {
	t, w := g.t, g.w
	lo, hi := i*g.per, min((i+1)*g.per, w.Shape[0]*w.Shape[1])
	kk, kw := w.Shape[2]*w.Shape[3], w.Shape[3]
	th, tw := t.p.KernelH, t.p.KernelW
	at := t.h0*kw + t.w0
	n := lo * th * tw
	for k := lo; k < hi; k++ {
		for i := range th {
			for _, v := range w.Data[k*kk+at+i*kw:][:tw] {
				g.out.Data[n] = v
				n++
			}
		}
	}
}

// addWeightGrad adds the trimmed kernel's gradient g [F·C, KH'·KW'] to
// the layer's dw [F, C, KH, KW] at the live taps.
func (t trimmedConv) addWeightGrad(dw *tensor.Tensor, g []float32) {
	kk, kw := dw.Shape[2]*dw.Shape[3], dw.Shape[3]
	th, tw := t.p.KernelH, t.p.KernelW
	at := t.h0*kw + t.w0
	n := 0
	for k := range dw.Shape[0] * dw.Shape[1] {
		for i := range th {
			row := dw.Data[k*kk+at+i*kw:][:tw]
			for j := range row {
				row[j] += g[n]
				n++
			}
		}
	}
}
