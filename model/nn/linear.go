package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gorun/gorun/model/tensor"
)

// Linear is torch.nn.Linear: y = x·Wᵀ + b. State: weight [out, in], bias [out].
type Linear struct {
	be                tensor.Backend
	In, Out           int
	Weight, Bias      *tensor.Tensor
	WeightGrad, BGrad *tensor.Tensor
	x, y              *tensor.Tensor
	inputGrad
	result
	deferral
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
	if err := l.check(); err != nil {
		return nil, err
	}
	l.x = x
	y := l.out.get(x, x.Shape[0], l.Out)
	l.y = y
	l.be.MatMul(x, false, l.Weight, true, y, 1, 0)
	l.be.AddBias(y, l.Bias)
	return y, nil
}

// Backward implements Layer.
func (l *Linear) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, l.y); err != nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	if l.deferral.on {
		l.hold(dy, l.inputGrad.pool)
	} else {
		l.be.MatMul(dy, true, l.x, false, l.WeightGrad, 1, 1)
		l.be.BiasGrad(dy, l.BGrad)
	}
	dx := l.dx.get(dy, l.x.Shape...)
	l.be.MatMul(dy, false, l.Weight, false, dx, 1, 0)
	return dx, nil
}

// State implements Layer.
func (l *Linear) State() []Var {
	return []Var{{Name: "weight", Value: l.Weight, Grad: l.WeightGrad}, {Name: "bias", Value: l.Bias, Grad: l.BGrad}}
}

// SetTraining implements Layer.
func (l *Linear) SetTraining(bool) {}

// Replica implements Layer: it shares the weights and their gradients.
func (l *Linear) Replica() Layer {
	r := *l
	r.x, r.y, r.inputGrad, r.result = nil, nil, inputGrad{}, result{}
	r.deferral = deferral{on: l.deferral.on}
	return &r
}
