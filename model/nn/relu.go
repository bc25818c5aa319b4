package nn

import (
	"github.com/gorun/gorun/model/tensor"
)

// ReLU is torch.nn.ReLU.
type ReLU struct {
	stateless
	be tensor.Backend
	// InPlace overwrites the input with the output, as
	// torch.nn.ReLU(inplace=True): no memory for the output, but only
	// right where nothing else reads the input afterwards — after a batch
	// norm, convolution or linear layer, whose backward does not read its
	// output, and which no other layer reads.
	InPlace bool
	y       *tensor.Tensor // the last output
	bn      *BatchNorm2d   // the batch norm this relu is fused into (fuseReLUs)
	inputGrad
	result
}

// NewReLU returns a ReLU.
func NewReLU(be tensor.Backend) *ReLU { return &ReLU{be: be} }

// NewReLUInPlace returns a ReLU that overwrites its input (see InPlace).
func NewReLUInPlace(be tensor.Backend) *ReLU { return &ReLU{be: be, InPlace: true} }

// Forward implements Layer.
func (r *ReLU) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	y := x
	switch {
	case r.fused():
		// x is the fused batch norm's output, already through the relu.
	case r.InPlace:
		r.be.ReLU(x, y)
	default:
		y = r.out.get(x, x.Shape...)
		r.be.ReLU(x, y)
	}
	r.y = y
	return y, nil
}

// Backward implements Layer.
func (r *ReLU) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, r.y); err != nil {
		return nil, err
	}
	if r.fused() {
		return dy, nil // the batch norm's backward applies the mask
	}
	dx := r.dx.get(dy, dy.Shape...)
	r.be.ReLUBackward(r.y, dy, dx)
	return dx, nil
}

// fused reports whether this relu is fused into the batch norm before it.
func (r *ReLU) fused() bool { return r.bn != nil && r.bn.relu == r }

// Replica implements Layer.
func (r *ReLU) Replica() Layer { return &ReLU{be: r.be, InPlace: r.InPlace} }
