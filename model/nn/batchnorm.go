package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// BatchNorm2d is torch.nn.BatchNorm2d (affine, tracking running statistics,
// momentum 0.1, eps 1e-5; the running variance uses the unbiased batch
// variance). It also accepts [N, C] inputs, as BatchNorm1d. State: weight,
// bias, running_mean, running_var, num_batches_tracked.
type BatchNorm2d struct {
	be                      tensor.Backend
	C                       int
	P                       tensor.BatchNormParams
	Weight, Bias            *tensor.Tensor
	WeightGrad, BGrad       *tensor.Tensor
	RunningMean, RunningVar *tensor.Tensor
	BatchesTracked          int64
	tracked                 *int64 // a replica's: the original's BatchesTracked
	mean, invStd            *tensor.Tensor
	x, y                    *tensor.Tensor
	inputGrad
	result
}

// NewBatchNorm2d returns a batch norm over c channels with weight 1, bias 0,
// running mean 0 and running variance 1, in training mode.
func NewBatchNorm2d(be tensor.Backend, c int) *BatchNorm2d {
	b := &BatchNorm2d{be: be, C: c, P: tensor.BatchNormParams{Training: true, Momentum: 0.1, Eps: 1e-5}}
	b.Weight, b.WeightGrad = param(c)
	b.Bias, b.BGrad = param(c)
	b.RunningMean, b.RunningVar = tensor.New(c), tensor.New(c)
	for i := range c {
		b.Weight.Data[i], b.RunningVar.Data[i] = 1, 1
	}
	return b
}

// Forward implements Layer.
func (b *BatchNorm2d) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if (x.Dims() != 4 && x.Dims() != 2) || x.Shape[1] != b.C {
		return nil, fmt.Errorf("input %s, want [N %d H W] or [N %d]", x, b.C, b.C)
	}
	if b.P.Training && tensor.Volume(x.Shape)/b.C < 2 {
		return nil, fmt.Errorf("input %s has one value per channel; training needs more", x)
	}
	b.x = x
	tensor.ReuseLike(&b.mean, x, b.C)
	tensor.ReuseLike(&b.invStd, x, b.C)
	y := b.out.get(x, x.Shape...)
	b.y = y
	b.be.BatchNorm(x, y, b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.mean, b.invStd, b.P)
	if b.P.Training {
		*b.counter()++
	}
	return y, nil
}

// Backward implements Layer.
func (b *BatchNorm2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, b.y); err != nil {
		return nil, err
	}
	dx := b.dx.get(dy, b.x.Shape...)
	b.be.BatchNormBackward(b.x, dy, dx, b.Weight, b.WeightGrad, b.BGrad, b.mean, b.invStd, b.P)
	return dx, nil
}

// State implements Layer.
func (b *BatchNorm2d) State() []Var {
	return []Var{
		{Name: "weight", Value: b.Weight, Grad: b.WeightGrad},
		{Name: "bias", Value: b.Bias, Grad: b.BGrad},
		{Name: "running_mean", Value: b.RunningMean},
		{Name: "running_var", Value: b.RunningVar},
		{Name: "num_batches_tracked", Count: b.counter()},
	}
}

// SetTraining implements Layer.
func (b *BatchNorm2d) SetTraining(training bool) { b.P.Training = training }

// Replica implements Layer: it shares the parameters, running statistics
// and batch counter.
func (b *BatchNorm2d) Replica() Layer {
	r := *b
	r.x, r.y, r.inputGrad, r.result = nil, nil, inputGrad{}, result{}
	r.mean, r.invStd = nil, nil
	r.tracked = b.counter()
	return &r
}

// counter is the batch count this layer advances: its own, or for a
// replica its original's.
func (b *BatchNorm2d) counter() *int64 {
	if b.tracked != nil {
		return b.tracked
	}
	return &b.BatchesTracked
}
