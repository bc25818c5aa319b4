package nn

import (
	"fmt"
	"slices"

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
	// statsOf is the shape of the input whose batch statistics mean and
	// invStd hold. While replay is set (by the Checkpoint this layer is
	// inside, as it recomputes), a training pass over an input of that
	// shape — the same input again — normalises with them instead of
	// computing them anew (tensor.BatchNormParams.SavedStats).
	statsOf []int
	replay  bool
	// inputOnly, set by the residual block this layer ends (a branch of)
	// while a Checkpoint recomputes it knowing its output already, makes
	// a replaying Forward keep its input for Backward and make no output
	// (it returns the input); keptInput reports that the last Forward did.
	inputOnly, keptInput bool
	x, y                 *tensor.Tensor
	// relu, when set, is the in-place relu right after this layer in its
	// container, fused into this layer's passes (fuseReLUs): Forward
	// leaves the relu's output, Backward takes the relu's output gradient,
	// and the relu passes both through.
	relu  *ReLU
	fused tensor.BatchNormReLUBackend
	// conv is the convolution right before this layer that applies it
	// while gradients are off and it evaluates (fuseConvBNs).
	conv *Conv2d
	// passNext: the convolution's last Forward applied this layer, whose
	// next Forward (the container's next call) passes its input through.
	passNext bool
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
	b.keptInput = false
	if (x.Dims() != 4 && x.Dims() != 2) || x.Shape[1] != b.C {
		return nil, fmt.Errorf("input %s, want [N %d H W] or [N %d]", x, b.C, b.C)
	}
	if b.P.Training && tensor.Volume(x.Shape)/b.C < 2 {
		return nil, fmt.Errorf("input %s has one value per channel; training needs more", x)
	}
	if b.passNext {
		// The convolution before this layer applied it (and the relu
		// fused into it) already.
		b.passNext = false
		b.x, b.y = x, x
		return x, nil
	}
	b.x = x
	p := b.P
	if p.Training && b.replay && b.mean != nil && slices.Equal(b.statsOf, x.Shape) {
		p.SavedStats = true
		if b.inputOnly && !b.fusedReLU() {
			// Backward reads x and the first pass's statistics, nothing
			// else; the output is its container's already.
			b.y, b.keptInput = x, true
			return x, nil
		}
	} else {
		tensor.ReuseLike(&b.mean, x, b.C)
		tensor.ReuseLike(&b.invStd, x, b.C)
		b.statsOf = append(b.statsOf[:0], x.Shape...)
	}
	y := b.out.get(x, x.Shape...)
	b.y = y
	if b.fusedReLU() {
		b.fused.BatchNormReLU(x, y, b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.mean, b.invStd, p)
	} else {
		b.be.BatchNorm(x, y, b.Weight, b.Bias, b.RunningMean, b.RunningVar, b.mean, b.invStd, p)
	}
	if p.Training && !p.SavedStats {
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
	if b.fusedReLU() {
		b.fused.BatchNormReLUBackward(b.x, dy, dx, b.Weight, b.Bias, b.WeightGrad, b.BGrad, b.mean, b.invStd, b.P)
	} else {
		b.be.BatchNormBackward(b.x, dy, dx, b.Weight, b.WeightGrad, b.BGrad, b.mean, b.invStd, b.P)
	}
	return dx, nil
}

// fusedReLU reports whether the relu after this layer is fused into it:
// both sides of the pairing still hold (fuseReLUs).
func (b *BatchNorm2d) fusedReLU() bool { return b.relu != nil && b.relu.bn == b }

// fuseReLUs pairs every batch norm in layers with the in-place relu right
// after it, when the batch norm's backend runs the two in one pass
// (tensor.BatchNormReLUBackend), and undoes the pairings of batch norms
// no longer followed by one. A container calls it whenever its list of
// children changes. An in-place relu's input is read by nothing else
// (ReLU.InPlace), so only the relu's output, which the fused layer
// leaves, is ever seen.
func fuseReLUs(layers []Layer) {
	for i, l := range layers {
		bn, ok := l.(*BatchNorm2d)
		if !ok {
			continue
		}
		if bn.relu != nil && bn.relu.bn == bn {
			bn.relu.bn = nil
		}
		bn.relu, bn.fused = nil, nil
		fb, ok := bn.be.(tensor.BatchNormReLUBackend)
		if !ok || i+1 == len(layers) {
			continue
		}
		if r, ok := layers[i+1].(*ReLU); ok && r.InPlace {
			bn.relu, bn.fused, r.bn = r, fb, bn
		}
	}
}

// fuseConvBNs pairs every convolution in layers with the batch norm right
// after it, when the convolution's backend applies an evaluation-mode
// batch norm as it convolves (tensor.ConvBatchNormBackend), and undoes
// the pairings no longer adjacent. The pairing acts only in passes with
// gradients off and the batch norm evaluating (Conv2d.foldsBN). A
// container calls it whenever its list of children changes; nothing but
// the batch norm reads a convolution's output in a container's sequence.
func fuseConvBNs(layers []Layer) {
	for i, l := range layers {
		conv, ok := l.(*Conv2d)
		if !ok {
			continue
		}
		if conv.bn != nil && conv.bn.conv == conv {
			conv.bn.conv = nil
		}
		conv.bn, conv.fusedBN = nil, nil
		fb, ok := conv.be.(tensor.ConvBatchNormBackend)
		if !ok || i+1 == len(layers) {
			continue
		}
		// (A batch norm over another channel count is left to fail on
		// its own, naming the mismatch.)
		if bn, ok := layers[i+1].(*BatchNorm2d); ok && bn.be == conv.be && bn.C == conv.Out {
			conv.bn, conv.fusedBN, bn.conv = bn, fb, conv
		}
	}
}

// foldsPair returns layers[i] when it is a convolution that applies the
// batch norm right after it in this pass (Conv2d.foldsBN), else nil;
// containers ask only when their gradients are off (through's forward).
func foldsPair(layers []Layer, i int) *Conv2d {
	conv, ok := layers[i].(*Conv2d)
	if !ok || !conv.foldsBN() || i+1 >= len(layers) || layers[i+1] != Layer(conv.bn) {
		return nil
	}
	return conv
}

// foldsToEnd reports whether conv, layers[i], folding the batch norm
// after it (foldsPair), has that batch norm and the relu fused into it,
// if any, as the last of layers: they pass the convolution's output
// through, so it is the container's output and goes where the
// container's caller lent.
func foldsToEnd(layers []Layer, i int, conv *Conv2d) bool {
	switch len(layers) - i {
	case 2:
		return true
	case 3:
		r, ok := layers[i+2].(*ReLU)
		return ok && r.fused() && r.bn == conv.bn
	}
	return false
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
	r.mean, r.invStd, r.statsOf, r.replay = nil, nil, nil, false
	r.inputOnly, r.keptInput = false, false
	r.relu, r.fused, r.conv, r.passNext = nil, nil, nil, false // the replica's container pairs it anew
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
