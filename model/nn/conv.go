package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gorun/gorun/model/tensor"
)

// Conv2dOptions are torch.nn.Conv2d's optional arguments: stride 1,
// padding 0, bias on.
type Conv2dOptions struct {
	Stride  int
	Padding int
	NoBias  bool
}

// Conv2d is torch.nn.Conv2d (dilation 1, groups 1). State: weight
// [out, in, k, k], bias [out].
type Conv2d struct {
	be                tensor.Backend
	In, Out           int
	P                 tensor.ConvParams
	Weight, Bias      *tensor.Tensor
	WeightGrad, BGrad *tensor.Tensor
	// NoInputGrad makes Backward skip the gradient with respect to the
	// input and return nil: for a network's first layer, whose input is
	// data (PyTorch skips it too, as the data does not require grad).
	NoInputGrad bool
	x, y, dx    *tensor.Tensor
}

// NewConv2d returns a convolution initialised as PyTorch does:
// kaiming-uniform with a = √5, so weight and bias are uniform in
// ±1/√(in·k·k).
func NewConv2d(be tensor.Backend, in, out, kernel int, o Conv2dOptions, rng *rand.Rand) *Conv2d {
	if o.Stride == 0 {
		o.Stride = 1
	}
	c := &Conv2d{be: be, In: in, Out: out, P: tensor.ConvParams{KernelH: kernel, KernelW: kernel, StrideH: o.Stride, StrideW: o.Stride, PadH: o.Padding, PadW: o.Padding}}
	c.Weight, c.WeightGrad = param(out, in, kernel, kernel)
	bound := float32(1 / math.Sqrt(float64(in*kernel*kernel)))
	uniformFill(c.Weight, bound, rng)
	if !o.NoBias {
		c.Bias, c.BGrad = param(out)
		uniformFill(c.Bias, bound, rng)
	}
	return c
}

func uniformFill(t *tensor.Tensor, bound float32, rng *rand.Rand) {
	for i := range t.Data {
		t.Data[i] = (2*rng.Float32() - 1) * bound
	}
}

// Forward implements Layer.
func (c *Conv2d) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if err := expect4D(x, c.In); err != nil {
		return nil, err
	}
	oh, ow := c.P.OutSize(x.Shape[2], x.Shape[3])
	if oh <= 0 || ow <= 0 {
		return nil, fmt.Errorf("input %s is smaller than the %dx%d kernel with padding %d", x, c.P.KernelH, c.P.KernelW, c.P.PadH)
	}
	c.x = x
	y := tensor.ReuseLike(&c.y, x, x.Shape[0], c.Out, oh, ow)
	c.be.Conv2d(x, c.Weight, c.Bias, y, c.P)
	return y, nil
}

// Backward implements Layer.
func (c *Conv2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, c.y); err != nil {
		return nil, err
	}
	if c.NoInputGrad {
		c.be.Conv2dBackward(c.x, c.Weight, dy, nil, c.WeightGrad, c.BGrad, c.P)
		return nil, nil
	}
	dx := tensor.ReuseLike(&c.dx, dy, c.x.Shape...)
	c.be.Conv2dBackward(c.x, c.Weight, dy, dx, c.WeightGrad, c.BGrad, c.P)
	return dx, nil
}

// State implements Layer.
func (c *Conv2d) State() []Var {
	s := []Var{{Name: "weight", Value: c.Weight, Grad: c.WeightGrad}}
	if c.Bias != nil {
		s = append(s, Var{Name: "bias", Value: c.Bias, Grad: c.BGrad})
	}
	return s
}

// SetTraining implements Layer.
func (c *Conv2d) SetTraining(bool) {}

// Linear is torch.nn.Linear: y = x·Wᵀ + b. State: weight [out, in], bias [out].
type Linear struct {
	be                tensor.Backend
	In, Out           int
	Weight, Bias      *tensor.Tensor
	WeightGrad, BGrad *tensor.Tensor
	x, y, dx          *tensor.Tensor
}

// NewLinear returns a linear layer initialised as PyTorch does (uniform in
// ±1/√in for weight and bias).
func NewLinear(be tensor.Backend, in, out int, rng *rand.Rand) *Linear {
	l := &Linear{be: be, In: in, Out: out}
	l.Weight, l.WeightGrad = param(out, in)
	l.Bias, l.BGrad = param(out)
	bound := float32(1 / math.Sqrt(float64(in)))
	uniformFill(l.Weight, bound, rng)
	uniformFill(l.Bias, bound, rng)
	return l
}

// Forward implements Layer.
func (l *Linear) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x.Dims() != 2 || x.Shape[1] != l.In {
		return nil, fmt.Errorf("input %s, want [N %d]", x, l.In)
	}
	l.x = x
	y := tensor.ReuseLike(&l.y, x, x.Shape[0], l.Out)
	l.be.MatMul(x, false, l.Weight, true, y, 1, 0)
	l.be.AddBias(y, l.Bias)
	return y, nil
}

// Backward implements Layer.
func (l *Linear) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, l.y); err != nil {
		return nil, err
	}
	l.be.MatMul(dy, true, l.x, false, l.WeightGrad, 1, 1)
	l.be.BiasGrad(dy, l.BGrad)
	dx := tensor.ReuseLike(&l.dx, dy, l.x.Shape...)
	l.be.MatMul(dy, false, l.Weight, false, dx, 1, 0)
	return dx, nil
}

// State implements Layer.
func (l *Linear) State() []Var {
	return []Var{{Name: "weight", Value: l.Weight, Grad: l.WeightGrad}, {Name: "bias", Value: l.Bias, Grad: l.BGrad}}
}

// SetTraining implements Layer.
func (l *Linear) SetTraining(bool) {}
