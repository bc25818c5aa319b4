package cpu

import (
	"math"

	"github.com/gorun/gorun/model/tensor"
)

// Max pooling over 3×3 windows at stride 2 (ResNet's stem), a plane at a
// time with the vector kernels, where the general path (pool.go) picks
// each row's windows in one or more calls — with a padded copy and a
// scalar edge in rows too short for the kernels' blocks of eight windows,
// as ResNet-18's 16×16 maps on CIFAR-10 — and scans each output row's
// window rows in two more. BenchmarkMaxPool3x3: forward 16×16 maps 4×
// and 112×112 1.2× faster; backward below.
//
// The plane is laid out padded with −∞ to its 2·OH + 1 rows of 2·OW + 2
// values (padded row R, column C holding the input's row R − padH,
// column C − padW), the even rows in one array and the odd rows after
// them in another, so that in each array every window starts two values
// after the one before: OW + 1 windows a row, the last straddling two
// rows and ignored. The row picks of each array's windows
// (rowPicks3Vector) are then scanned in the window's row order, padded
// rows 2i, 2i + 1 and 2i + 2 for output row i (pickRowsVector). −∞
// padding is never taken over an element, and the elements are scanned
// in the order of the general path's row picks, so each output is the
// same value; its position is the same element, except where the scan
// took nothing but the padding it started on — every element −∞ — and
// PyTorch's is then the window's first element (what the general path's
// scan starts on).

// planesBackwardMaxOW is the widest output row for which the backward
// pass takes planes (BenchmarkMaxPool3x3, backward: 2.2–3.1× faster on
// 16×16 to 32×32 maps, 1.0–1.6× on 56×56, 0.9× on 112×112, where every
// row fills the vector kernel's blocks and the plane's copy and the
// positions' mapping cost more than they save).
const planesBackwardMaxOW = 32

// picksPlanes reports whether max pooling takes its windows a plane at a
// time (planePicks3): 3×3 windows at stride 2 and padding at most 1
// (PyTorch allows no more than half the kernel), ResNet's; the backward
// pass also needs rows of at most planesBackwardMaxOW outputs.
func picksPlanes(p tensor.PoolParams) bool {
	return p.KernelH == 3 && p.KernelW == 3 && p.StrideH == 2 && p.StrideW == 2 && p.PadH <= 1 && p.PadW <= 1
}

// planePicks3 is one worker's layout and picks for one call's planes. It
// runs the vector kernels directly: its callers take it only where they
// run (vecOps.vector).
type planePicks3 struct {
	h, w, oh, ow int
	padH, padW   int
	wp, per      int // a padded row's values and windows
	nE, nO       int // windows picked in the even rows' array and the odd rows'
	cw           int // the columns of an input row some window reads
	// padded holds the even rows' array, then the odd rows' (at offO);
	// a window's position is its element's index there.
	padded    []float32
	offO      int
	picks     []float32 // the even rows' picks, the odd rows', the scan's
	pe, po    []float32
	best      []float32
	atE, atO  []int32 // the picks' positions
	at, zeros []int32 // the scan's positions; nO zeros (positions unused)
	inputAt   []int32 // a padded position's input element, or −1 for padding
}

// layout prepares the arrays for x's h×w planes pooled into oh×ow
// outputs, with every padding value −∞.
func (q *planePicks3) layout(x *tensor.Tensor, oh, ow int, p tensor.PoolParams) {
	q.h, q.w, q.oh, q.ow, q.padH, q.padW = x.Shape[2], x.Shape[3], oh, ow, p.PadH, p.PadW
	q.wp, q.per = 2*ow+2, ow+1
	q.nE, q.nO = roundUp((oh+1)*q.per, 8), roundUp(oh*q.per, 8)
	q.cw = min(q.w, 2*ow+1-p.PadW) // padded columns 0 … 2·OW
	// rowPicks3Vector reads two values past its last window's start.
	q.offO = 2*q.nE + 2
	q.padded = grow(&q.padded, q.offO+2*q.nO+2)
	for i := range q.padded {
		q.padded[i] = float32(math.Inf(-1))
	}
	// The even rows' picks are read from window 0 and from window per
	// (each output's third row), nO at a time.
	lenE := max(q.nE, q.per+q.nO)
	q.picks = grow(&q.picks, lenE+2*q.nO)
	q.pe, q.po, q.best = q.picks[:lenE], q.picks[lenE:][:q.nO], q.picks[lenE+q.nO:][:q.nO]
	pos := grow(&q.atE, lenE+3*q.nO)
	q.atE, q.atO, q.at, q.zeros = pos[:lenE], pos[lenE:][:q.nO], pos[lenE+q.nO:][:q.nO], pos[lenE+2*q.nO:][:q.nO]
	clear(q.zeros)
}

// pick lays out the plane in and scans its windows: q.best[i·per + j]
// is output (i, j) and, with positions, q.at[i·per + j] its position in
// q.padded.
func (q *planePicks3) pick(in []float32, positions bool) {
	even, odd := q.padded[:q.offO], q.padded[q.offO:]
	for r := range min(q.h, 2*q.oh+1-q.padH) {
		pr := r + q.padH
		dst := even
		if pr%2 == 1 {
			dst = odd
		}
		copy(dst[pr/2*q.wp+q.padW:][:q.cw], in[r*q.w:][:q.cw])
	}
	rowPicks3Vector(&q.pe[0], &q.atE[0], &even[0], 0, q.nE)
	rowPicks3Vector(&q.po[0], &q.atO[0], &odd[0], q.offO, q.nO)
	copy(q.best, q.pe[:q.nO])
	if !positions {
		pickRowsVector(&q.best[0], &q.at[0], &q.po[0], &q.zeros[0], 0, q.nO)
		pickRowsVector(&q.best[0], &q.at[0], &q.pe[q.per], &q.zeros[0], 0, q.nO)
		return
	}
	copy(q.at, q.atE[:q.nO])
	pickRowsVector(&q.best[0], &q.at[0], &q.po[0], &q.atO[0], 0, q.nO)
	pickRowsVector(&q.best[0], &q.at[0], &q.pe[q.per], &q.atE[q.per], 0, q.nO)
}

// inputs fills q.inputAt: each padded position's element of the input
// plane, −1 for padding.
func (q *planePicks3) inputs() {
	at := grow(&q.inputAt, len(q.padded))
	for i := range at {
		rowOf, col := i/q.wp, i%q.wp // in the even rows' array
		pr := 2 * rowOf
		if i >= q.offO {
			rowOf, col = (i-q.offO)/q.wp, (i-q.offO)%q.wp
			pr = 2*rowOf + 1
		}
		r, c := pr-q.padH, col-q.padW
		at[i] = -1
		if r >= 0 && r < q.h && c >= 0 && c < q.cw {
			at[i] = int32(r*q.w + c)
		}
	}
}

// maxPool pools planes [lo, hi) of x into y.
func (q *planePicks3) maxPool(x, y *tensor.Tensor, p tensor.PoolParams, lo, hi int) {
	h, w := x.Shape[2], x.Shape[3]
	oh, ow := y.Shape[2], y.Shape[3]
	if oh == 0 || ow == 0 {
		return
	}
	q.layout(x, oh, ow, p)
	for pl := lo; pl < hi; pl++ {
		q.pick(x.Data[pl*h*w:(pl+1)*h*w], false)
		out := y.Data[pl*oh*ow : (pl+1)*oh*ow]
		for i := range oh {
			copy(out[i*ow:(i+1)*ow], q.best[i*q.per:])
		}
	}
}

// maxPoolBackward adds each output's gradient of planes [lo, hi) of dy
// to its window's maximum in dx (cleared by the caller).
func (q *planePicks3) maxPoolBackward(x, dy, dx *tensor.Tensor, p tensor.PoolParams, lo, hi int) {
	h, w := x.Shape[2], x.Shape[3]
	oh, ow := dy.Shape[2], dy.Shape[3]
	if oh == 0 || ow == 0 {
		return
	}
	q.layout(x, oh, ow, p)
	q.inputs()
	for pl := lo; pl < hi; pl++ {
		q.pick(x.Data[pl*h*w:(pl+1)*h*w], true)
		g := dy.Data[pl*oh*ow : (pl+1)*oh*ow]
		out := dx.Data[pl*h*w : (pl+1)*h*w]
		for i := range oh {
			for j, pos := range q.at[i*q.per : i*q.per+ow] {
				e := q.inputAt[pos]
				if e < 0 { // every element −∞: the window's first
					e = int32(max(2*i-q.padH, 0)*w + max(2*j-q.padW, 0))
				}
				out[e] += g[i*ow+j]
			}
		}
	}
}
