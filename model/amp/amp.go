// Package amp is mixed-precision training as torch.autocast and
// torch.amp.GradScaler do it: matrix products and convolutions with
// 16-bit inputs and outputs and float32 accumulation; batch norm,
// softmax, losses and the optimizer in float32 on float32 master weights;
// for fp16, the loss scaled so small gradients survive and the steps
// whose gradients overflow skipped.
//
// Autocast emulates the 16-bit arithmetic on the CPU: each product's
// operands are rounded to the 16-bit format (round to nearest even, as
// torch converts), the product runs in float32 (the accumulation
// tensor cores do in float32), and its result is rounded again. The
// numbers are those of a GPU's 16-bit path up to summation order, so the
// tests here check the logic (what is rounded, the scaler's decisions)
// where no GPU is. The 16-bit formats are ring's (ring.BFloat16,
// ring.Float16), the ones collectives put on the wire.
package amp

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
	"github.com/gorun/gorun/ring"
)

// Precision is the arithmetic of a run's matrix products and
// convolutions.
type Precision string

// The precisions (train's --precision).
const (
	FP32 Precision = "fp32" // float32 throughout
	TF32 Precision = "tf32" // on a GPU, float32 storage with TF32 tensor cores in products (the CPU has none: float32)
	BF16 Precision = "bf16" // torch.autocast(dtype=torch.bfloat16)
	FP16 Precision = "fp16" // torch.autocast(dtype=torch.float16) with a GradScaler
)

// Parse reads a precision's name ("" is FP32).
func Parse(s string) (Precision, error) {
	switch p := Precision(s); p {
	case "":
		return FP32, nil
	case FP32, TF32, BF16, FP16:
		return p, nil
	}
	return "", fmt.Errorf("precision %q: want fp32, tf32, bf16 or fp16", s)
}

// Half reports whether products run in a 16-bit format.
func (p Precision) Half() bool { return p == BF16 || p == FP16 }

// Round returns v rounded to p's format (v itself for the 32-bit ones).
func (p Precision) Round(v float32) float32 {
	switch p {
	case BF16:
		return ring.NewBFloat16(v).Float32()
	case FP16:
		return ring.NewFloat16(v).Float32()
	}
	return v
}

// roundInto sets dst[i] = p.Round(src[i]).
func (p Precision) roundInto(dst, src []float32) {
	switch p {
	case BF16:
		for i, v := range src {
			dst[i] = ring.NewBFloat16(v).Float32()
		}
	case FP16:
		for i, v := range src {
			dst[i] = ring.NewFloat16(v).Float32()
		}
	default:
		copy(dst, src)
	}
}

// Autocast is a tensor.Backend whose matrix products and convolutions
// run as torch.autocast runs them in a 16-bit precision; every other
// operation is the wrapped backend's, in float32. Gradients flowing back
// through a product are rounded too (the gradient of a 16-bit output is
// 16-bit), and a parameter's gradient is rounded before it is added to
// its float32 accumulator. A bias added after a product (a linear
// layer's) is added in float32 to the rounded product.
//
// Operands are rounded into scratch buffers, one per operand, which grow
// to the largest tensor seen and are reused: steady-state steps allocate
// nothing more.
type Autocast struct {
	tensor.Backend
	p Precision
	// operands holds the rounded copies of a call's operands (input,
	// weights, bias, output gradient) and the unrounded parameter
	// gradients; the wrapped backend keeps none past the call.
	operands [numOperands]tensor.Tensor
}

// The operands Autocast rounds or collects into scratch.
const (
	opInput = iota
	opWeights
	opBias
	opOutputGrad
	opProduct
	opBiasGrad
	numOperands
)

// NewAutocast wraps be (a host backend; the GPU's backend has a 16-bit
// path of its own, gpu.Options.Autocast) for precision p, which must be
// 16-bit.
func NewAutocast(be tensor.Backend, p Precision) (*Autocast, error) {
	if !p.Half() {
		return nil, fmt.Errorf("amp: autocast to %s: only bf16 and fp16 are emulated", p)
	}
	if dev := tensor.DeviceOf(be); dev != nil {
		return nil, fmt.Errorf("amp: precision %s on %s: Autocast emulates 16-bit products on host backends only (a GPU backend autocasts itself: gpu.Options.Autocast)", p, dev)
	}
	return &Autocast{Backend: be, p: p}, nil
}

// Name implements tensor.Backend.
func (a *Autocast) Name() string {
	return fmt.Sprintf("%s, products and convolutions in %s (emulated: float32 arithmetic on rounded operands)", a.Backend.Name(), a.p)
}

// rounded returns t rounded to the 16-bit format in operand's scratch
// (nil for nil).
func (a *Autocast) rounded(t *tensor.Tensor, operand int) *tensor.Tensor {
	if t == nil {
		return nil
	}
	c := a.scratch(t, operand)
	a.p.roundInto(c.Data, t.Data)
	return c
}

// zeroed returns operand's scratch shaped like t, zeroed.
func (a *Autocast) zeroed(t *tensor.Tensor, operand int) *tensor.Tensor {
	c := a.scratch(t, operand)
	clear(c.Data)
	return c
}

// scratch shapes operand's scratch like t, growing it if needed.
func (a *Autocast) scratch(t *tensor.Tensor, operand int) *tensor.Tensor {
	c := &a.operands[operand]
	n := len(t.Data)
	if cap(c.Data) < n {
		c.Data = make([]float32, n)
	}
	c.Data = c.Data[:n]
	c.Shape = append(c.Shape[:0], t.Shape...)
	return c
}

// accumulate adds into dst (a parameter's float32 gradient) the rounded
// values of g.
func (a *Autocast) accumulate(dst, g *tensor.Tensor) {
	for i, v := range g.Data {
		dst.Data[i] += a.p.Round(v)
	}
}

// roundInPlace rounds t's values to the 16-bit format.
func (a *Autocast) roundInPlace(t *tensor.Tensor) { a.p.roundInto(t.Data, t.Data) }

// MatMul implements tensor.Backend: c = alpha·op(a)·op(b) + beta·c with
// a and b rounded and the product rounded; with beta ≠ 0 (a gradient
// accumulating) the rounded product is added in float32.
func (a *Autocast) MatMul(x *tensor.Tensor, transA bool, y *tensor.Tensor, transB bool, c *tensor.Tensor, alpha, beta float32) {
	xr, yr := a.rounded(x, opInput), a.rounded(y, opWeights)
	if beta == 0 {
		a.Backend.MatMul(xr, transA, yr, transB, c, alpha, 0)
		a.roundInPlace(c)
		return
	}
	prod := a.zeroed(c, opProduct)
	a.Backend.MatMul(xr, transA, yr, transB, prod, alpha, 0)
	for i, v := range prod.Data {
		c.Data[i] = beta*c.Data[i] + a.p.Round(v)
	}
}

// Conv2d implements tensor.Backend: input, weights and bias rounded, the
// output rounded.
func (a *Autocast) Conv2d(x, w, b, y *tensor.Tensor, p tensor.ConvParams) {
	a.Backend.Conv2d(a.rounded(x, opInput), a.rounded(w, opWeights), a.rounded(b, opBias), y, p)
	a.roundInPlace(y)
}

// Conv2dBackward implements tensor.Backend: from the rounded input,
// weights and output gradient, the input gradient rounded, and the
// weight and bias gradients rounded before they are added to their
// float32 accumulators.
func (a *Autocast) Conv2dBackward(x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams) {
	var dwp, dbp *tensor.Tensor
	if dw != nil {
		dwp = a.zeroed(dw, opProduct)
	}
	if db != nil {
		dbp = a.zeroed(db, opBiasGrad)
	}
	a.Backend.Conv2dBackward(a.rounded(x, opInput), a.rounded(w, opWeights), a.rounded(dy, opOutputGrad), dx, dwp, dbp, p)
	if dx != nil {
		a.roundInPlace(dx)
	}
	if dw != nil {
		a.accumulate(dw, dwp)
	}
	if db != nil {
		a.accumulate(db, dbp)
	}
}
