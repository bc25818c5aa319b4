package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// stateless provides the State and SetTraining of layers without state.
type stateless struct{}

// State implements Layer.
func (stateless) State() []Var { return nil }

// SetTraining implements Layer.
func (stateless) SetTraining(bool) {}

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

// Pool2d is torch.nn.MaxPool2d or torch.nn.AvgPool2d (ceil_mode false,
// count_include_pad true); the stride defaults to the kernel size.
type Pool2d struct {
	stateless
	be       tensor.Backend
	Max      bool
	P        tensor.PoolParams
	x, y, dx *tensor.Tensor
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
	y := tensor.ReuseLike(&p.y, x, x.Shape[0], x.Shape[1], oh, ow)
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
	dx := tensor.ReuseLike(&p.dx, dy, p.x.Shape...)
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
	be       tensor.Backend
	OH, OW   int
	x, y, dx *tensor.Tensor
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
	y := tensor.ReuseLike(&p.y, x, x.Shape[0], x.Shape[1], p.OH, p.OW)
	p.be.AdaptiveAvgPool2d(x, y)
	return y, nil
}

// Backward implements Layer.
func (p *AdaptiveAvgPool2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, p.y); err != nil {
		return nil, err
	}
	dx := tensor.ReuseLike(&p.dx, dy, p.x.Shape...)
	p.be.AdaptiveAvgPool2dBackward(dy, dx)
	return dx, nil
}

// Dropout is torch.nn.Dropout: in training, zero each element with
// probability P and scale the rest by 1/(1−P); in evaluation, identity.
// Masks come from a seeded counter-based generator: the k-th training
// Forward of a layer with seed s draws the same mask on every run and every
// backend.
type Dropout struct {
	stateless
	be        tensor.Backend
	P         float32
	Seed      uint64
	Calls     uint64  // training forwards so far; part of the RNG state
	calls     *uint64 // a replica's: the original's Calls
	training  bool
	mask, out *tensor.Tensor
	y, dx     *tensor.Tensor // y is the last output (x itself in evaluation)
}

// NewDropout returns dropout with probability p, in training mode.
func NewDropout(be tensor.Backend, p float32, seed uint64) *Dropout {
	return &Dropout{be: be, P: p, Seed: seed, training: true}
}

// SetTraining implements Layer.
func (d *Dropout) SetTraining(training bool) { d.training = training }

// Forward implements Layer.
func (d *Dropout) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if !d.training || d.P == 0 {
		d.y = x
		return x, nil
	}
	if d.P < 0 || d.P > 1 {
		return nil, fmt.Errorf("dropout probability %v outside [0, 1]", d.P)
	}
	mask := tensor.ReuseLike(&d.mask, x, x.Shape...)
	y := tensor.ReuseLike(&d.out, x, x.Shape...)
	calls := &d.Calls
	if d.calls != nil {
		calls = d.calls
	}
	d.be.Dropout(x, y, mask, d.P, d.Seed^(*calls*0xd1b54a32d192ed03+0x632be59bd9b4e019))
	*calls++
	d.y = y
	return y, nil
}

// Backward implements Layer.
func (d *Dropout) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, d.y); err != nil {
		return nil, err
	}
	if !d.training || d.P == 0 {
		return dy, nil
	}
	dx := tensor.ReuseLike(&d.dx, dy, dy.Shape...)
	d.be.Mul(dy, d.mask, dx)
	return dx, nil
}

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

// LogSoftmax is torch.nn.LogSoftmax(dim=1) on [N, C].
type LogSoftmax struct {
	stateless
	be    tensor.Backend
	y, dx *tensor.Tensor
}

// NewLogSoftmax returns a log-softmax over classes.
func NewLogSoftmax(be tensor.Backend) *LogSoftmax { return &LogSoftmax{be: be} }

// Forward implements Layer.
func (l *LogSoftmax) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if x.Dims() != 2 || x.Shape[1] == 0 {
		return nil, fmt.Errorf("input %s, want [N C]", x)
	}
	y := tensor.ReuseLike(&l.y, x, x.Shape...)
	l.be.LogSoftmax(x, y)
	return y, nil
}

// Backward implements Layer.
func (l *LogSoftmax) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, l.y); err != nil {
		return nil, err
	}
	dx := tensor.ReuseLike(&l.dx, dy, dy.Shape...)
	l.be.LogSoftmaxBackward(l.y, dy, dx)
	return dx, nil
}
