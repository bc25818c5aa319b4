package cpu

import (
	"slices"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// A prepared convolution keeps, from one forward call to the next, what
// an unprepared one builds from its weights on every call: the kernel of
// its live taps when some meet only padding (taps.go), and the weights in
// the form its algorithm multiplies — the dense matrix, packed as the
// product's operand (dense.go), Winograd's U (winograd.go) or the kernel
// with the channels innermost (rows.go). On ResNet-18's CIFAR-10 layers
// building those forms took a quarter of an evaluation pass at batch 32.
// Layers prepare only while their weights are frozen (nn.Freeze); im2col
// + GEMM layers keep just the live taps, their GEMM packing the weights
// on each call as before.
//
// In training the weights change every step, but not between a layer's
// forward pass and its backward pass: a dense layer's forward pass keeps
// its matrix V for the backward pass's input gradient (Conv2dKeep,
// Conv2dBackwardKept), which built it a second time before (7% of a
// ResNet-18 step on CIFAR-10 at one thread).

// prepared is one layer's prepared weights (tensor.PreparedWeights.State).
type prepared struct {
	key   prepKey
	ready bool // a call has filled it
	// forBackward marks what a training forward pass keeps for its
	// backward pass (Conv2dKeep): the dense matrix V itself, in form;
	// the other forms are not kept (the backward pass's are others).
	forBackward bool
	p           tensor.ConvParams // the params the layer runs with (its live taps')
	live        *tensor.Tensor    // the live taps' kernel; nil when all are live
	form        []float32         // U or the rows kernel, or the storage of packed
	// packed is Vᵀ packed as a GEMM operand, when the layer runs as its
	// dense matrix.
	packed gemm.PackedB
	// uPacked is Winograd's U packed as its products' B operands
	// (Uᵀ [C, F] for each of the 16 or 36 tile elements), when the layer
	// runs channels last.
	uPacked []gemm.PackedB
	// aPacked is the weights' form packed as the products' A operands:
	// Winograd's U [F, C] for each tile element (planes), the rows
	// kernel [F, KH·KW·C] or the kernel [F, C·KH·KW] (im2col).
	aPacked []gemm.PackedA
}

// packA returns count m×k matrices of form, stride apart, packed as the
// products' A operands: packed anew when fill is set (form was just
// built) or none are held.
func (pr *prepared) packA(e *gemm.Engine, form []float32, count, stride, m, k int, fill bool) []gemm.PackedA {
	if !fill && len(pr.aPacked) == count {
		return pr.aPacked
	}
	pr.aPacked = pr.aPacked[:0]
	for x := range count {
		pa, err := e.PackA(nil, m, k, gemm.Matrix{Data: form[x*stride : x*stride+m*k], Stride: k})
		must(err)
		pr.aPacked = append(pr.aPacked, pa)
	}
	return pr.aPacked
}

// packU returns the count matrices of Winograd's U [count][F][C] (u), or
// of its transpose [count][C][F] when uT is set (F(4×4, 3×3)'s), packed
// as the B operands Uᵀ of the channels-last products, packed anew when
// fill is set (u was just built) or none are held.
func (pr *prepared) packU(e *gemm.Engine, u []float32, count, f, c int, uT, fill bool) []gemm.PackedB {
	if !fill && len(pr.uPacked) == count {
		return pr.uPacked
	}
	pr.uPacked = pr.uPacked[:0]
	us := winoStride(f * c)
	b := gemm.Matrix{Stride: c, Trans: true}
	if uT {
		b = gemm.Matrix{Stride: f}
	}
	for x := range count {
		b.Data = u[x*us : x*us+f*c]
		pb, err := e.PackB(nil, c, f, b)
		must(err)
		pr.uPacked = append(pr.uPacked, pb)
	}
	return pr.uPacked
}

// prepKey is what a prepared layer's forms depend on besides the weights'
// values: the input's channels and map, the kernel's storage and shape,
// and the layer's params.
type prepKey struct {
	c, h, wd, f int
	w           *float32
	p           tensor.ConvParams
}

// Conv2dPrepared implements tensor.PreparedConvBackend.
func (b *Backend) Conv2dPrepared(prep *tensor.PreparedWeights, x, w, bias, y, gamma, beta, runMean, runVar *tensor.Tensor, p tensor.ConvParams, bn tensor.BatchNormParams, relu bool) {
	var norm *convNorm
	if gamma != nil {
		norm = b.evalNorm(gamma, beta, runMean, runVar, bn, relu)
	}
	b.conv2dPrepared(prep, x, w, bias, y, p, norm)
}

// Conv2dPreparedResidual implements tensor.ResidualConvBackend: the sum
// and relu follow each image's batch norm, a row of output at a time.
func (b *Backend) Conv2dPreparedResidual(prep *tensor.PreparedWeights, x, w, bias, y, gamma, beta, runMean, runVar, residual *tensor.Tensor, p tensor.ConvParams, bn tensor.BatchNormParams) {
	norm := b.evalNorm(gamma, beta, runMean, runVar, bn, false)
	norm.residual = residual.Data
	b.conv2dPrepared(prep, x, w, bias, y, p, norm)
}

// conv2dPrepared is Conv2dPrepared with its batch norm, if any, as norm.
func (b *Backend) conv2dPrepared(prep *tensor.PreparedWeights, x, w, bias, y *tensor.Tensor, p tensor.ConvParams, norm *convNorm) {
	pr := preparedIn(prep, keyOf(x, w, p), false)
	if !pr.ready {
		live, lp, _ := b.liveKernel(x, w, p)
		pr.p = lp
		if live != w {
			pr.live = &tensor.Tensor{Shape: slices.Clone(live.Shape), Data: slices.Clone(live.Data)}
		}
	}
	run := w
	if pr.live != nil {
		run = pr.live
	}
	b.runConv(false, x, run, bias, y, nil, nil, nil, nil, pr.p, norm, pr)
	pr.ready = true
}

// preparedIn returns what state holds for a call with this key, or, when
// it holds nothing or another key's or mode's, a new empty one it then
// holds.
func preparedIn(state *tensor.PreparedWeights, key prepKey, forBackward bool) *prepared {
	pr, _ := state.State.(*prepared)
	if pr == nil || pr.key != key || pr.forBackward != forBackward {
		pr = &prepared{key: key, forBackward: forBackward}
		state.State = pr
	}
	return pr
}

// keyOf is the prepKey of a convolution of x by w with params p.
func keyOf(x, w *tensor.Tensor, p tensor.ConvParams) prepKey {
	return prepKey{c: x.Shape[1], h: x.Shape[2], wd: x.Shape[3], f: w.Shape[0], w: &w.Data[0], p: p}
}

// Conv2dKeep implements tensor.KeptConvBackend.
func (b *Backend) Conv2dKeep(keep *tensor.PreparedWeights, x, w, bias, y *tensor.Tensor, p tensor.ConvParams) {
	pr := preparedIn(keep, keyOf(x, w, p), true)
	pr.ready = false // built anew: the weights may have changed since the last pass
	w, p, _ = b.liveKernel(x, w, p)
	b.runConv(false, x, w, bias, y, nil, nil, nil, nil, p, nil, pr)
	pr.ready = true
}

// Conv2dBackwardKept implements tensor.KeptConvBackend.
func (b *Backend) Conv2dBackwardKept(keep *tensor.PreparedWeights, x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams) {
	pr, _ := keep.State.(*prepared)
	if pr != nil && (pr.key != keyOf(x, w, p) || !pr.forBackward || !pr.ready) {
		pr = nil
	}
	b.conv2dBackward(x, w, dy, dx, dw, db, p, pr)
}

// weightsForm returns the buffer of n values for a form of the task's
// weights, and whether the caller is to fill it: the backend's scratch,
// filled on every call, unless the call is prepared; then the prepared
// layer's own, filled on its first call.
func (t *convTask) weightsForm(scratch *[]float32, n int) ([]float32, bool) {
	switch {
	case !t.keepsForm(n):
		return grow(scratch, n), true
	case t.prep.ready:
		return t.prep.form[:n], false
	}
	return grow(&t.prep.form, n), true
}

// maxPreparedElems bounds a form a prepared layer keeps: 4 MiB, the
// largest of ResNet-18's on CIFAR-10 (its 256-channel layers' dense
// matrices). Larger forms belong to layers whose products dwarf their
// preparation (ResNet-50's 512-channel Winograd layers at 224×224: 16 MiB
// each, for no measurable gain), and are built on every call as before.
const maxPreparedElems = 1 << 20

// maxPackedAElems bounds a form a prepared layer also keeps packed as
// its products' A operands: 512 KiB, a copy ResNet-18's layers on
// CIFAR-10 afford (packing it per group of images was 3% of an
// evaluation pass) and ResNet-50's larger ones would pay for in memory
// (46 MiB more for their 1×1 kernels and Winograd forms; BENCHMARKS.md,
// ResNet-50 on the CPU) to save little: their products are long for
// their weights.
const maxPackedAElems = 1 << 17

// packsA reports whether the task keeps its weights' form of n values
// packed as the products' A operands too.
func (t *convTask) packsA(n int) bool { return t.keepsForm(n) && n <= maxPackedAElems }

// keepsForm reports whether the task keeps its weights' form of n values
// from one call to the next: prepared, forward, not too large.
func (t *convTask) keepsForm(n int) bool {
	return t.prep != nil && !t.prep.forBackward && !t.backward && n <= maxPreparedElems
}
