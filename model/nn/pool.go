package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// Pool2d is torch.nn.MaxPool2d or torch.nn.AvgPool2d (ceil_mode false,
// count_include_pad true); the stride defaults to the kernel size.
type Pool2d struct {
	stateless
	be   tensor.Backend
	Max  bool
	P    tensor.PoolParams
	x, y *tensor.Tensor
	inputGrad
	result
}

// NewMaxPool2d returns max pooling; stride 0 means the kernel size.
func NewMaxPool2d(be tensor.Backend, kernel, stride, padding int) *Pool2d {
	return newPool(be, true, kernel, stride, padding)
}

// NewAvgPool2d returns average pooling; stride 0 means the kernel size.
func NewAvgPool2d(be tensor.Backend, kernel, stride, padding int) *Pool2d {
	return newPool(be, false, kernel, stride, padding)
}

func newPool(be tensor.Backend, isMax bool, kernel, stride, padding int) *Pool2d {
	if stride == 0 {
		stride = kernel
	}
	return &Pool2d{be: be, Max: isMax, P: tensor.PoolParams{KernelH: kernel, KernelW: kernel, StrideH: stride, StrideW: stride, PadH: padding, PadW: padding}}
}

// Forward implements Layer.
func (p *Pool2d) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if err := expect4D(x, 0); err != nil {
		return nil, err
	}
	if 2*p.P.PadH > p.P.KernelH {
		return nil, fmt.Errorf("padding %d is more than half the kernel %d", p.P.PadH, p.P.KernelH)
	}
	oh, ow := p.P.OutSize(x.Shape[2], x.Shape[3])
	if oh <= 0 || ow <= 0 {
		return nil, fmt.Errorf("input %s is smaller than the %dx%d window", x, p.P.KernelH, p.P.KernelW)
	}
	p.x = x
	y := p.out.get(x, x.Shape[0], x.Shape[1], oh, ow)
	p.y = y
	if p.Max {
		p.be.MaxPool2d(x, y, p.P)
	} else {
		p.be.AvgPool2d(x, y, p.P)
	}
	return y, nil
}

// Backward implements Layer.
func (p *Pool2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, p.y); err != nil {
		return nil, err
	}
	dx := p.dx.get(dy, p.x.Shape...)
	if p.Max {
		p.be.MaxPool2dBackward(p.x, dy, dx, p.P)
	} else {
		p.be.AvgPool2dBackward(dy, dx, p.P)
	}
	return dx, nil
}

// AdaptiveAvgPool2d is torch.nn.AdaptiveAvgPool2d to an OH×OW output.
type AdaptiveAvgPool2d struct {
	stateless
	be     tensor.Backend
	OH, OW int
	x, y   *tensor.Tensor
	inputGrad
	result
}

// NewAdaptiveAvgPool2d returns adaptive average pooling to oh×ow.
func NewAdaptiveAvgPool2d(be tensor.Backend, oh, ow int) *AdaptiveAvgPool2d {
	return &AdaptiveAvgPool2d{be: be, OH: oh, OW: ow}
}

// Forward implements Layer.
func (p *AdaptiveAvgPool2d) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if err := expect4D(x, 0); err != nil {
		return nil, err
	}
	if x.Shape[2] == 0 || x.Shape[3] == 0 {
		return nil, fmt.Errorf("input %s has no pixels", x)
	}
	p.x = x
	y := p.out.get(x, x.Shape[0], x.Shape[1], p.OH, p.OW)
	p.y = y
	p.be.AdaptiveAvgPool2d(x, y)
	return y, nil
}

// Backward implements Layer.
func (p *AdaptiveAvgPool2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, p.y); err != nil {
		return nil, err
	}
	dx := p.dx.get(dy, p.x.Shape...)
	p.be.AdaptiveAvgPool2dBackward(dy, dx)
	return dx, nil
}

// Replica implements Layer.
func (p *Pool2d) Replica() Layer { return &Pool2d{be: p.be, Max: p.Max, P: p.P} }

// Replica implements Layer.
func (p *AdaptiveAvgPool2d) Replica() Layer {
	return &AdaptiveAvgPool2d{be: p.be, OH: p.OH, OW: p.OW}
}
