// Package nn holds the layers: each computes its forward pass, and its
// backward pass from the gradient of its output, through a tensor.Backend.
//
// Layers follow PyTorch's semantics and defaults, and name their parameters
// and buffers as torch.nn does, so a model's State matches the state_dict of
// the same PyTorch model key for key. Parameter gradients accumulate across
// Backward calls until ZeroGrad, as in PyTorch.
package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// Layer is one module of a network.
type Layer interface {
	// Forward computes the output for x. The layer keeps what Backward
	// needs; the returned tensor is owned by the layer and overwritten by
	// its next Forward.
	Forward(x *tensor.Tensor) (*tensor.Tensor, error)
	// Backward takes the gradient of the loss with respect to the last
	// Forward's output, accumulates parameter gradients and returns the
	// gradient with respect to its input (owned by the layer).
	Backward(dy *tensor.Tensor) (*tensor.Tensor, error)
	// State lists parameters and buffers, named relative to the layer in
	// PyTorch's state_dict order.
	State() []Var
	// SetTraining switches between training (batch statistics, dropout) and
	// evaluation behaviour.
	SetTraining(training bool)
}

// Var is one named entry of a model's state: a parameter (Grad set), a
// float buffer (Grad nil), or an integer counter such as BatchNorm's
// num_batches_tracked (Count set, Value nil).
type Var struct {
	Name  string
	Value *tensor.Tensor
	Grad  *tensor.Tensor
	Count *int64
}

// IsParam reports whether v is a trainable parameter.
func (v Var) IsParam() bool { return v.Grad != nil }

// Params returns the trainable parameters of l.
func Params(l Layer) []Var {
	var ps []Var
	for _, v := range l.State() {
		if v.IsParam() {
			ps = append(ps, v)
		}
	}
	return ps
}

// ZeroGrad clears the gradients of l's parameters. It allocates nothing.
func ZeroGrad(be tensor.Backend, l Layer) {
	Walk(l, func(l Layer) {
		switch l := l.(type) {
		case *Conv2d:
			be.Fill(l.WeightGrad, 0)
			if l.BGrad != nil {
				be.Fill(l.BGrad, 0)
			}
		case *Linear:
			be.Fill(l.WeightGrad, 0)
			be.Fill(l.BGrad, 0)
		case *BatchNorm2d:
			be.Fill(l.WeightGrad, 0)
			be.Fill(l.BGrad, 0)
		}
	})
}

// param allocates a parameter and its gradient.
func param(shape ...int) (*tensor.Tensor, *tensor.Tensor) {
	return tensor.New(shape...), tensor.New(shape...)
}

// prefixed returns state with every name prefixed by "name.".
func prefixed(name string, state []Var) []Var {
	out := make([]Var, len(state))
	for i, v := range state {
		v.Name = name + "." + v.Name
		out[i] = v
	}
	return out
}

// expect checks that x is a 4-D [N, C, H, W] tensor with c channels.
func expect4D(x *tensor.Tensor, c int) error {
	if x.Dims() != 4 {
		return fmt.Errorf("input %s is not 4-D [N C H W]", x)
	}
	if c > 0 && x.Shape[1] != c {
		return fmt.Errorf("input %s has %d channels, want %d", x, x.Shape[1], c)
	}
	if x.Shape[0] == 0 {
		return fmt.Errorf("input %s is an empty batch", x)
	}
	return nil
}

// sameShape checks that a gradient has its output's shape.
func sameShape(dy, y *tensor.Tensor) error {
	if y == nil {
		return fmt.Errorf("backward before forward")
	}
	if !dy.SameShape(y.Shape...) {
		return fmt.Errorf("gradient %s does not match output %s", dy, y)
	}
	return nil
}
