package cpu

import (
	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// Convolutions over maps no larger than their kernels run as one product
// over the whole batch with the layer unrolled into a dense matrix: V
// [F·OH·OW, C·H·W] joins each output to each input through the tap
// between them (zero where none is), so that
//
//	Y  = X · Vᵀ    [N, F·OH·OW]   (the outputs' own layout)
//	dX = dY · V    [N, C·H·W]     (the inputs' own layout)
//	dV = dYᵀ · X,  folded back tap by tap into dW.
//
// On such maps im2col multiplies mostly padding (ResNet-18's 3×3 layers
// on CIFAR-10's 2×2 maps: 36 multiply-adds an output where 16 reach an
// input, each column a few values long) and Winograd's one tile an image
// pays a weight transform per call for sixteen small products; V's
// product makes at most as many multiply-adds as im2col's (H·W ≤ KH·KW)
// with no column matrix at all, and, the batch being one product, its
// columns split over the threads — where a chunk of images a thread
// packed the whole kernel for a few columns. Building V, like packing the
// kernel, costs one pass over the weights a call.

// maxDenseElems bounds V: 16 MB.
const maxDenseElems = 1 << 22

// useDense reports whether the layer runs as its dense matrix.
func (b *Backend) useDense(g geometry, p tensor.ConvParams) bool {
	return b.convAlgo == ConvAuto && g.h*g.wd <= p.KernelH*p.KernelW && g.ohw > 0 &&
		g.f*g.ohw*g.c*g.h*g.wd <= maxDenseElems
}

// denseTaps sets tab[j·H·W + i] to the kernel tap (kh·KW + kw) through
// which output j reads input i, or −1 where it reads none.
func denseTaps(tab []int32, g geometry, p tensor.ConvParams) {
	for i := range tab {
		tab[i] = -1
	}
	hw := g.h * g.wd
	for oy := range g.oh {
		for ox := range g.ow {
			j := oy*g.ow + ox
			for kh := range p.KernelH {
				iy := oy*p.StrideH - p.PadH + kh
				if iy < 0 || iy >= g.h {
					continue
				}
				for kw := range p.KernelW {
					if ix := ox*p.StrideW - p.PadW + kw; ix >= 0 && ix < g.wd {
						tab[j*hw+iy*g.wd+ix] = int32(kh*p.KernelW + kw)
					}
				}
			}
		}
	}
}

// denseTask builds V from the kernel, or folds dV into the kernel's
// gradient, a range of filters a part.
type denseTask struct {
	fold bool
	g    geometry
	kk   int       // taps a kernel
	tab  []int32   // denseTaps
	w    []float32 // the kernel [F, C, KH, KW], or its gradient when folding
	v    []float32 // V or dV [F·OH·OW, C·H·W]
	per  int       // filters a part
}

// Do implements parallel.Task. For each output j and input i of a row of
// V, one tap joins the two for every channel: a strided copy over the
// channels (a plain one for 1×1 maps and kernels).
func (d *denseTask) Do(_, part int) {
	g, hw, kk := d.g, d.g.h*d.g.wd, d.kk
	row := g.c * hw
	for f := part * d.per; f < min((part+1)*d.per, g.f); f++ {
		kernels := d.w[f*g.c*kk : (f+1)*g.c*kk] // filter f's C kernels
		for j := range g.ohw {
			v := d.v[(f*g.ohw+j)*row : (f*g.ohw+j+1)*row]
			if hw == 1 && kk == 1 && g.ohw == 1 {
				// One output, one tap: the row is the filter (with
				// padding, the outputs beyond the input read nothing:
				// the taps below).
				if d.fold {
					for c, x := range v {
						kernels[c] += x
					}
				} else {
					copy(v, kernels)
				}
				continue
			}
			taps := d.tab[j*hw : (j+1)*hw]
			if hw == 4 && !d.fold && taps[0] >= 0 && taps[1] >= 0 && taps[2] >= 0 && taps[3] >= 0 {
				// 2×2 maps, each output reading every input (3×3
				// kernels, padding 1): four values a channel at once.
				t0, t1, t2, t3 := taps[0], taps[1], taps[2], taps[3]
				for c := range g.c {
					k, vc := kernels[c*kk:(c+1)*kk], v[c*4:c*4+4]
					vc[0], vc[1], vc[2], vc[3] = k[t0], k[t1], k[t2], k[t3]
				}
				continue
			}
			for i, tap := range taps {
				switch {
				case tap < 0 && d.fold:
				case tap < 0:
					for c := range g.c {
						v[c*hw+i] = 0
					}
				case d.fold:
					k := kernels[tap:]
					for c := range g.c {
						k[c*kk] += v[c*hw+i]
					}
				default:
					k := kernels[tap:]
					for c := range g.c {
						v[c*hw+i] = k[c*kk]
					}
				}
			}
		}
	}
}

// runDense runs the task's convolution as its dense matrix, every
// product split over the threads; in backward, the weight and bias
// gradients are added to dw and db (when not nil).
func (t *convTask) runDense(dw, db *tensor.Tensor) {
	b, g := t.b, t.g
	hw := g.h * g.wd
	rows, cols := g.f*g.ohw, g.c*hw // V's
	tab := grow(&b.denseTab, g.ohw*hw)
	denseTaps(tab, g, t.p)
	d := &b.dense
	*d = denseTask{g: g, kk: t.p.KernelH * t.p.KernelW, tab: tab, per: ceilDiv(g.f, b.pool.Threads())}
	defer func() { *d = denseTask{} }()
	parts := ceilDiv(g.f, d.per)
	x := gemm.Matrix{Data: t.x.Data, Stride: cols}
	// Evaluating frozen, Vᵀ is packed once as the product's B (packed);
	// training, V is built by the forward pass and read by the backward
	// one (kept).
	var packed, kept *prepared
	switch {
	case t.prep == nil:
	case t.prep.forBackward:
		if rows*cols <= maxPreparedElems {
			kept = t.prep
		}
	case t.keepsForm(rows * cols):
		packed = t.prep
	}
	d.w = t.w.Data
	switch {
	case t.backward && t.dx == nil: // no V: the weight gradient folds dV
	case kept != nil && t.backward:
		d.v = kept.form[:rows*cols]
	case kept != nil:
		d.v = grow(&kept.form, rows*cols)
		b.pool.Run(parts, d)
	case packed != nil && packed.ready:
	default:
		d.v = grow(&b.denseV, rows*cols)
		b.pool.Run(parts, d)
		if packed != nil {
			var err error
			packed.packed, err = b.gemm.PackB(packed.form, cols, rows, gemm.Matrix{Data: d.v, Stride: cols, Trans: true})
			must(err)
		}
	}
	if !t.backward {
		y := gemm.Matrix{Data: t.y.Data, Stride: rows}
		if packed != nil {
			must(b.gemm.SgemmPackedB(t.n, rows, cols, 1, x, packed.packed, 0, y))
		} else {
			must(b.gemm.Sgemm(t.n, rows, cols, 1, x, gemm.Matrix{Data: d.v, Stride: cols, Trans: true}, 0, y))
		}
		for k := range t.n {
			yk := t.y.Data[k*rows : (k+1)*rows]
			t.addBias(yk, g.ohw)
			t.normalise(yk, k)
		}
		return
	}
	dy := gemm.Matrix{Data: t.dy.Data, Stride: rows}
	if t.dx != nil {
		must(b.gemm.Sgemm(t.n, cols, rows, 1, dy, gemm.Matrix{Data: d.v, Stride: cols}, 0, gemm.Matrix{Data: t.dx.Data, Stride: cols}))
	}
	if dw != nil {
		dv := grow(&b.denseV, rows*cols)
		must(b.gemm.Sgemm(rows, cols, t.n, 1, gemm.Matrix{Data: t.dy.Data, Stride: rows, Trans: true}, x, 0, gemm.Matrix{Data: dv, Stride: cols}))
		d.fold, d.w, d.v = true, dw.Data, dv
		b.pool.Run(parts, d)
	}
	if db != nil {
		for k := range t.n {
			addRowSums(db.Data, t.dy.Data[k*rows:(k+1)*rows], g.ohw, g.ohw)
		}
	}
}
