package nn

import (
	"github.com/gorun/gorun/model/tensor"
)

// ReLU is torch.nn.ReLU.
type ReLU struct {
	stateless
	be    tensor.Backend
	y, dx *tensor.Tensor
}

// NewReLU returns a ReLU.
func NewReLU(be tensor.Backend) *ReLU { return &ReLU{be: be} }

// Forward implements Layer.
func (r *ReLU) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	y := tensor.ReuseLike(&r.y, x, x.Shape...)
	r.be.ReLU(x, y)
	return y, nil
}

// Backward implements Layer.
func (r *ReLU) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, r.y); err != nil {
		return nil, err
	}
	dx := tensor.ReuseLike(&r.dx, dy, dy.Shape...)
	r.be.ReLUBackward(r.y, dy, dx)
	return dx, nil
}

// Replica implements Layer.
func (r *ReLU) Replica() Layer { return &ReLU{be: r.be} }
