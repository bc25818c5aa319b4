package cpu

import (
	"github.com/gorun/gorun/model/tensor"
)

// window returns the clipped input range of output index o and, for
// average pooling with count_include_pad, the unclipped window size.
func window(o, stride, pad, k, size int) (lo, hi, span int) {
	lo = o*stride - pad
	hi = min(lo+k, size+pad)
	span = hi - lo
	return max(lo, 0), min(hi, size), span
}

// MaxPool2d implements tensor.Backend. Planes are spread over the threads.
func (b *Backend) MaxPool2d(x, y *tensor.Tensor, p tensor.PoolParams) {
	b.runElem(elemTask{op: opMaxPool, n: x.Shape[0] * x.Shape[1], x: x, y: y, pool: p}, 1+(1<<14)/(x.Shape[2]*x.Shape[3]))
}

// MaxPool2dBackward implements tensor.Backend.
func (b *Backend) MaxPool2dBackward(x, dy, dx *tensor.Tensor, p tensor.PoolParams) {
	b.runElem(elemTask{op: opMaxPoolBackward, n: x.Shape[0] * x.Shape[1], x: x, y: dy, z: dx, pool: p}, 1+(1<<14)/(x.Shape[2]*x.Shape[3]))
}

// halving reports the common 2×2, stride 2, unpadded pooling.
func halving(p tensor.PoolParams) bool {
	return p.KernelH == 2 && p.KernelW == 2 && p.StrideH == 2 && p.StrideW == 2 && p.PadH == 0 && p.PadW == 0
}

// maxPoolPlanes pools planes [lo, hi) of x into y. A window's maximum is
// PyTorch's: the first of equal maxima, or the window's last NaN. The 2×2,
// stride-2 windows take the vector rows, the 3×3, stride-2 ones whole
// planes (pool3.go); other windows are pooled row first (poolOutputRow),
// which finds the element PyTorch's row-major scan finds: "the last NaN,
// else the first maximum" of a sequence is that of the picks of its
// consecutive runs, here each window row's elements.
func maxPoolPlanes(vec vecOps, s *scratch, x, y *tensor.Tensor, p tensor.PoolParams, lo, hi int) {
	h, w := x.Shape[2], x.Shape[3]
	oh, ow := y.Shape[2], y.Shape[3]
	if vec.vector && picksPlanes(p) {
		s.pool3.maxPool(x, y, p, lo, hi)
		return
	}
	for pl := lo; pl < hi; pl++ {
		in := x.Data[pl*h*w : (pl+1)*h*w]
		out := y.Data[pl*oh*ow : (pl+1)*oh*ow]
		if halving(p) {
			for i := 0; i < oh; i++ {
				r0, r1 := in[2*i*w:2*i*w+2*ow], in[(2*i+1)*w:(2*i+1)*w+2*ow]
				vec.maxPoolRow(out[i*ow:(i+1)*ow], r0, r1)
			}
			continue
		}
		s.planePicks(vec, in, p, h, w, ow)
		for i := 0; i < oh; i++ {
			s.poolOutputRow(vec, out[i*ow:(i+1)*ow], i, p, h, w)
		}
	}
}

// maxPoolBackwardPlanes sets planes [lo, hi) of dx: each output's
// gradient goes to its window's maximum, found again as the forward pass
// finds it.
func maxPoolBackwardPlanes(vec vecOps, s *scratch, x, dy, dx *tensor.Tensor, p tensor.PoolParams, lo, hi int) {
	h, w := x.Shape[2], x.Shape[3]
	oh, ow := dy.Shape[2], dy.Shape[3]
	if !halving(p) {
		clear(dx.Data[lo*h*w : hi*h*w])
	}
	if vec.vector && picksPlanes(p) && ow <= planesBackwardMaxOW {
		s.pool3.maxPoolBackward(x, dy, dx, p, lo, hi)
		return
	}
	for pl := lo; pl < hi; pl++ {
		in := x.Data[pl*h*w : (pl+1)*h*w]
		g := dy.Data[pl*oh*ow : (pl+1)*oh*ow]
		out := dx.Data[pl*h*w : (pl+1)*h*w]
		if halving(p) {
			// Every element of the 2×2 windows is written; an odd last
			// row or column belongs to none.
			if h > 2*oh {
				clear(out[2*oh*w:])
			}
			for i := 0; i < oh; i++ {
				r0, r1 := in[2*i*w:2*i*w+2*ow], in[(2*i+1)*w:(2*i+1)*w+2*ow]
				d0, d1 := out[2*i*w:(2*i+1)*w], out[(2*i+1)*w:(2*i+2)*w]
				if w > 2*ow {
					d0[w-1], d1[w-1] = 0, 0
				}
				vec.maxPoolBackwardRow(d0[:2*ow], d1[:2*ow], r0, r1, g[i*ow:(i+1)*ow])
			}
			continue
		}
		s.planePicks(vec, in, p, h, w, ow)
		best := grow(&s.poolBest, ow)
		for i := 0; i < oh; i++ {
			at := s.poolOutputRow(vec, best, i, p, h, w)
			for j, pos := range at {
				out[pos] += g[i*ow+j]
			}
		}
	}
}

// planePicks takes the row picks of every row of the h×w plane in, for
// ow output columns: s.poolRows and s.poolCols hold, row after row, each
// output column's pick in that row and its column (vecOps.rowPicks).
func (s *scratch) planePicks(vec vecOps, in []float32, p tensor.PoolParams, h, w, ow int) {
	rows, cols := grow(&s.poolRows, h*ow), grow(&s.poolCols, h*ow)
	for r := 0; r < h; r++ {
		vec.rowPicks(rows[r*ow:(r+1)*ow], cols[r*ow:(r+1)*ow], in[r*w:(r+1)*w], p.StrideW, p.PadW, p.KernelW)
	}
}

// poolOutputRow sets best to output row i's maxima from the plane's row
// picks (planePicks), scanning its window rows in order, and returns
// their positions in the plane (int32: a plane holds fewer than 2³¹
// elements).
func (s *scratch) poolOutputRow(vec vecOps, best []float32, i int, p tensor.PoolParams, h, w int) []int32 {
	ow := len(best)
	at := grow(&s.poolAt, ow)
	h0, h1, _ := window(i, p.StrideH, p.PadH, p.KernelH, h)
	copy(best, s.poolRows[h0*ow:(h0+1)*ow])
	for j, c := range s.poolCols[h0*ow : (h0+1)*ow] {
		at[j] = int32(h0*w) + c
	}
	for r := h0 + 1; r < h1; r++ {
		vec.pickRows(best, at, s.poolRows[r*ow:(r+1)*ow], s.poolCols[r*ow:(r+1)*ow], r*w)
	}
	return at
}

// b2u is 1 for true and 0 for false (compiled to a flag move, no branch).
func b2u(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

// AvgPool2d implements tensor.Backend.
func (b *Backend) AvgPool2d(x, y *tensor.Tensor, p tensor.PoolParams) {
	rows, cols := fixedAxes(x, p)
	avgPool(x, y, rows, cols)
}

// AvgPool2dBackward implements tensor.Backend.
func (b *Backend) AvgPool2dBackward(dy, dx *tensor.Tensor, p tensor.PoolParams) {
	rows, cols := fixedAxes(dx, p)
	avgPoolBackward(dy, dx, rows, cols)
}

// AdaptiveAvgPool2d implements tensor.Backend.
func (b *Backend) AdaptiveAvgPool2d(x, y *tensor.Tensor) {
	rows, cols := adaptiveAxes(x, y)
	avgPool(x, y, rows, cols)
}

// AdaptiveAvgPool2dBackward implements tensor.Backend.
func (b *Backend) AdaptiveAvgPool2dBackward(dy, dx *tensor.Tensor) {
	rows, cols := adaptiveAxes(dx, dy)
	avgPoolBackward(dy, dx, rows, cols)
}

// axis describes the averaging windows along one dimension of size in:
// fixed (kernel, stride, padding, the divisor counting the padding as
// PyTorch's count_include_pad does) or adaptive to out outputs.
type axis struct {
	adaptive       bool
	k, stride, pad int
	in, out        int
}

// at returns output o's input range and the divisor's share.
func (a axis) at(o int) (lo, hi, span int) {
	if a.adaptive {
		lo, hi = adaptive(o, a.in, a.out)
		return lo, hi, hi - lo
	}
	return window(o, a.stride, a.pad, a.k, a.in)
}

func fixedAxes(x *tensor.Tensor, p tensor.PoolParams) (rows, cols axis) {
	return axis{k: p.KernelH, stride: p.StrideH, pad: p.PadH, in: x.Shape[2]},
		axis{k: p.KernelW, stride: p.StrideW, pad: p.PadW, in: x.Shape[3]}
}

func adaptiveAxes(x, y *tensor.Tensor) (rows, cols axis) {
	return axis{adaptive: true, in: x.Shape[2], out: y.Shape[2]}, axis{adaptive: true, in: x.Shape[3], out: y.Shape[3]}
}

// adaptive returns PyTorch's adaptive pooling window [floor(i·in/out),
// ceil((i+1)·in/out)).
func adaptive(i, in, out int) (int, int) {
	return i * in / out, ((i+1)*in + out - 1) / out
}

// wholePlane reports whether one output's window covers its whole h×w
// plane, and returns the divisor.
func wholePlane(rows, cols axis, h, w, oh, ow int) (float32, bool) {
	if oh != 1 || ow != 1 {
		return 0, false
	}
	h0, h1, hs := rows.at(0)
	w0, w1, ws := cols.at(0)
	return float32(hs * ws), h0 == 0 && h1 == h && w0 == 0 && w1 == w
}

// avgPool averages x's windows into y.
func avgPool(x, y *tensor.Tensor, rows, cols axis) {
	n, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	oh, ow := y.Shape[2], y.Shape[3]
	if d, ok := wholePlane(rows, cols, h, w, oh, ow); ok {
		// Global pooling (the ResNets' head): each plane's values in
		// order, as the loops below add them, without their window
		// arithmetic per output.
		for pl := range n * c {
			var s float32
			for _, v := range x.Data[pl*h*w : (pl+1)*h*w] {
				s += v
			}
			y.Data[pl] = s / d
		}
		return
	}
	for pl := 0; pl < n*c; pl++ {
		in := x.Data[pl*h*w : (pl+1)*h*w]
		out := y.Data[pl*oh*ow : (pl+1)*oh*ow]
		for i := 0; i < oh; i++ {
			h0, h1, hs := rows.at(i)
			for j := 0; j < ow; j++ {
				w0, w1, ws := cols.at(j)
				var s float32
				for r := h0; r < h1; r++ {
					for _, v := range in[r*w+w0 : r*w+w1] {
						s += v
					}
				}
				out[i*ow+j] = s / float32(hs*ws)
			}
		}
	}
}

// avgPoolBackward spreads each output's gradient evenly over its window.
func avgPoolBackward(dy, dx *tensor.Tensor, rows, cols axis) {
	n, c, h, w := dx.Shape[0], dx.Shape[1], dx.Shape[2], dx.Shape[3]
	oh, ow := dy.Shape[2], dy.Shape[3]
	clear(dx.Data)
	if d, ok := wholePlane(rows, cols, h, w, oh, ow); ok {
		for pl, g := range dy.Data[:n*c] {
			v := g / d
			for i := range dx.Data[pl*h*w : (pl+1)*h*w] {
				dx.Data[pl*h*w+i] += v
			}
		}
		return
	}
	for pl := 0; pl < n*c; pl++ {
		g := dy.Data[pl*oh*ow : (pl+1)*oh*ow]
		out := dx.Data[pl*h*w : (pl+1)*h*w]
		for i := 0; i < oh; i++ {
			h0, h1, hs := rows.at(i)
			for j := 0; j < ow; j++ {
				w0, w1, ws := cols.at(j)
				v := g[i*ow+j] / float32(hs*ws)
				for r := h0; r < h1; r++ {
					row := out[r*w+w0 : r*w+w1]
					for s := range row {
						row[s] += v
					}
				}
			}
		}
	}
}
