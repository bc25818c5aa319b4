package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// Flatten is torch.nn.Flatten: [N, ...] to [N, rest].
type Flatten struct {
	stateless
	shape []int
	y, dx *tensor.Tensor
}

// NewFlatten returns a flatten layer.
func NewFlatten() *Flatten { return &Flatten{} }

// Forward implements Layer.
func (f *Flatten) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x.Dims() < 1 {
		return nil, fmt.Errorf("input %s has no batch dimension", x)
	}
	f.shape = append(f.shape[:0], x.Shape...)
	return tensor.View(&f.y, x, x.Shape[0], x.Len()/max(x.Shape[0], 1))
}

// Backward implements Layer.
func (f *Flatten) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, f.y); err != nil {
		return nil, err
	}
	return tensor.View(&f.dx, dy, f.shape...)
}

// Replica implements Layer.
func (f *Flatten) Replica() Layer { return &Flatten{} }
