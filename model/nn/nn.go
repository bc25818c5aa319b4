package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/gorun/gorun/model/tensor"
)

// Layer is one module of a network.
type Layer interface {
	// Forward computes the output for x. The layer keeps what Backward
	// needs; the returned tensor is owned by the layer and overwritten by
	// its next Forward.
	Forward(x *tensor.Tensor) (*tensor.Tensor, error)
	// Backward takes the gradient of the loss with respect to the last
	// Forward's output, accumulates parameter gradients (unless
	// DeferWeightGrads left them to WeightGrads) and returns the gradient
	// with respect to its input (owned by the layer).
	Backward(dy *tensor.Tensor) (*tensor.Tensor, error)
	// State lists parameters and buffers, named relative to the layer in
	// PyTorch's state_dict order.
	State() []Var
	// SetTraining switches between training (batch statistics, dropout) and
	// evaluation behaviour.
	SetTraining(training bool)
	// Replica returns a layer that shares this one's parameters, gradients
	// and buffers (running statistics, counters) but keeps its own
	// activations. A pipeline stage keeps one replica per microbatch in
	// flight, so each microbatch's Backward finds its own Forward's
	// activations while all of them accumulate into the same gradients.
	Replica() Layer
}

// Container is a layer made of other layers. Walk, and everything built on
// it (device moves, per-layer hooks), reaches a container's children
// through it; a container's own State, SetTraining and Replica cover its
// children too.
type Container interface {
	Layer
	// Children returns the layers inside, in forward order.
	Children() []Layer
}

// InputGradSkipper is a layer that can stop computing the gradient of its
// input: a network's first layer, whose input is data (PyTorch skips it
// too, the data not requiring grad). Backward then returns nil.
type InputGradSkipper interface {
	SkipInputGrad()
}

// SkipInputGrad makes l skip the gradient of its input when it can, and
// reports whether it did.
func SkipInputGrad(l Layer) bool {
	s, ok := l.(InputGradSkipper)
	if ok {
		s.SkipInputGrad()
	}
	return ok
}

// Walk calls fn for l and, depth first, every layer inside it.
func Walk(l Layer, fn func(Layer)) {
	fn(l)
	if c, ok := l.(Container); ok {
		for _, ch := range c.Children() {
			Walk(ch, fn)
		}
	}
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

// ZeroGrad clears the gradients of params (from Params, kept by the
// caller: it allocates nothing), as PyTorch's optimizer.zero_grad().
func ZeroGrad(be tensor.Backend, params []Var) {
	for _, p := range params {
		be.Fill(p.Grad, 0)
	}
}

// param allocates a parameter and its gradient.
func param(shape ...int) (*tensor.Tensor, *tensor.Tensor) {
	return tensor.New(shape...), tensor.New(shape...)
}

// stateless provides the State and SetTraining of layers without state.
type stateless struct{}

// State implements Layer.
func (stateless) State() []Var { return nil }

// SetTraining implements Layer.
func (stateless) SetTraining(bool) {}

// uniformFill draws t uniformly from ±bound.
func uniformFill(t *tensor.Tensor, bound float32, rng *rand.Rand) {
	for i := range t.Data {
		t.Data[i] = (2*rng.Float32() - 1) * bound
	}
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
