package nn

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gorun/gorun/model/tensor"
)

// Conv2dOptions are torch.nn.Conv2d's optional arguments: stride 1,
// padding 0, bias on.
type Conv2dOptions struct {
	Stride  int
	Padding int
	NoBias  bool
}

// Conv2d is torch.nn.Conv2d (dilation 1, groups 1). State: weight
// [out, in, k, k], bias [out].
type Conv2d struct {
	be                tensor.Backend
	In, Out           int
	P                 tensor.ConvParams
	Weight, Bias      *tensor.Tensor
	WeightGrad, BGrad *tensor.Tensor
	// NoInputGrad makes Backward skip the gradient with respect to the
	// input and return nil: for a network's first layer, whose input is
	// data (PyTorch skips it too, as the data does not require grad).
	NoInputGrad bool
	x, y        *tensor.Tensor
	// bn, when set, is the batch norm right after this layer in its
	// container (fuseConvBNs), applied by this layer's backend as it
	// convolves (tensor.ConvBatchNormBackend) when the container runs the
	// two with gradients off and the batch norm evaluates (foldsPair);
	// the batch norm then passes its input through.
	bn      *BatchNorm2d
	fusedBN tensor.ConvBatchNormBackend
	// foldNext is set by that container for one Forward call.
	foldNext bool
	// offNext is set by a container running this layer with gradients
	// off, for one Forward call; frozen (Freeze) and evaluating (the last
	// SetTraining was false) too, the layer runs on weights prepared once
	// (prep) by its backend.
	offNext    bool
	frozen     bool
	evaluating bool
	prep       tensor.PreparedWeights
	prepBE     tensor.PreparedConvBackend
	// residual, set by a Residual for one Forward call, is its shortcut:
	// a prepared call folding the batch norm then ends with the block's
	// sum and relu as well (tensor.ResidualConvBackend), and sets summed.
	residual *tensor.Tensor
	summed   bool
	resBE    tensor.ResidualConvBackend
	// kept holds what a forward pass with gradients on left for its
	// backward pass (tensor.KeptConvBackend), on backends that keep;
	// keptLive says the last Forward call filled it.
	kept     tensor.PreparedWeights
	keepBE   tensor.KeptConvBackend
	keptLive bool
	// saved, set by the Checkpoint this layer is inside (Checkpoint.Save),
	// keeps the output from the checkpoint's first pass for its
	// recomputation.
	saved *savedOutput
	inputGrad
	result
	deferral
}

// NewConv2d returns a convolution initialised as PyTorch does:
// kaiming-uniform with a = √5, so weight and bias are uniform in
// ±1/√(in·k·k).
func NewConv2d(be tensor.Backend, in, out, kernel int, o Conv2dOptions, rng *rand.Rand) *Conv2d {
	if o.Stride == 0 {
		o.Stride = 1
	}
	c := &Conv2d{be: be, In: in, Out: out, P: tensor.ConvParams{KernelH: kernel, KernelW: kernel, StrideH: o.Stride, StrideW: o.Stride, PadH: o.Padding, PadW: o.Padding}}
	c.prepBE, _ = be.(tensor.PreparedConvBackend)
	c.resBE, _ = be.(tensor.ResidualConvBackend)
	c.keepBE, _ = be.(tensor.KeptConvBackend)
	c.Weight, c.WeightGrad = param(out, in, kernel, kernel)
	bound := float32(1 / math.Sqrt(float64(in*kernel*kernel)))
	uniformFill(c.Weight, bound, rng)
	if !o.NoBias {
		c.Bias, c.BGrad = param(out)
		uniformFill(c.Bias, bound, rng)
	}
	return c
}

// Forward implements Layer.
func (c *Conv2d) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if err := expect4D(x, c.In); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	oh, ow := c.P.OutSize(x.Shape[2], x.Shape[3])
	if oh <= 0 || ow <= 0 {
		return nil, fmt.Errorf("input %s is smaller than the %dx%d kernel with padding %d", x, c.P.KernelH, c.P.KernelW, c.P.PadH)
	}
	c.x = x
	gradsOff := c.offNext
	prepared := gradsOff && c.frozen && c.evaluating
	residual := c.residual
	c.offNext, c.keptLive, c.residual, c.summed = false, false, nil, false
	if c.saved.replays(x) {
		c.foldNext = false
		c.y = c.saved.y()
		return c.y, nil
	}
	var y *tensor.Tensor
	if c.saved.records() && !(c.foldNext && c.foldsBN()) {
		// Not into the container's buffer: the output stays for the
		// recomputation, and the layer after it cannot overwrite it.
		y = c.saved.output(x, x.Shape[0], c.Out, oh, ow)
	} else {
		y = c.out.get(x, x.Shape[0], c.Out, oh, ow)
	}
	c.y = y
	if bn := c.bn; c.foldNext && c.foldsBN() {
		c.foldNext = false
		switch {
		case prepared && residual != nil && c.resBE != nil && !bn.fusedReLU() && residual.SameShape(y.Shape...) && !tensor.Overlaps(y, residual):
			c.resBE.Conv2dPreparedResidual(&c.prep, x, c.Weight, c.Bias, y, bn.Weight, bn.Bias, bn.RunningMean, bn.RunningVar, residual, c.P, bn.P)
			c.summed = true
		case prepared:
			c.prepBE.Conv2dPrepared(&c.prep, x, c.Weight, c.Bias, y, bn.Weight, bn.Bias, bn.RunningMean, bn.RunningVar, c.P, bn.P, bn.fusedReLU())
		default:
			c.fusedBN.Conv2dBatchNorm(x, c.Weight, c.Bias, y, bn.Weight, bn.Bias, bn.RunningMean, bn.RunningVar, c.P, bn.P, bn.fusedReLU())
		}
		bn.passNext = true
		return y, nil
	}
	c.foldNext = false
	switch {
	case prepared:
		c.prepBE.Conv2dPrepared(&c.prep, x, c.Weight, c.Bias, y, nil, nil, nil, nil, c.P, tensor.BatchNormParams{}, false)
	case c.keepBE != nil && !gradsOff:
		c.keepBE.Conv2dKeep(&c.kept, x, c.Weight, c.Bias, y, c.P)
		c.keptLive = true
	default:
		c.be.Conv2d(x, c.Weight, c.Bias, y, c.P)
	}
	return y, nil
}

// Freeze sets whether the convolutions in l run on frozen weights: while
// on, a convolution evaluating with gradients off inside a container (as
// Evaluate and infer run a network) has its backend prepare its weights
// in the form it multiplies them (tensor.PreparedConvBackend: Winograd's
// transform, a small map's dense matrix, the channels innermost) on the
// first such pass and reuses them in the passes after, as
// torch.jit.freeze does for inference. The outputs keep their bits, but
// for the layers a backend runs otherwise when frozen (the CPU's 3×3
// stride-1 Winograd layers, with 4×4 tiles: within about 1e-5). The
// prepared weights are dropped by every SetTraining, SetGradEnabled,
// Freeze and LoadState call on the layer, so a training loop that
// evaluates between epochs prepares them again each time. Weights changed
// in between any other way (LoadVars, or copied into by hand while
// evaluating) must be followed by one of those calls. A backend without
// prepared convolutions (the GPU's) runs as before.
func Freeze(l Layer, on bool) {
	eachConv(l, func(c *Conv2d) {
		c.frozen = on && c.prepBE != nil
		c.prep.Reset()
	})
}

// dropPrepared drops the prepared weights of the convolutions in l.
func dropPrepared(l Layer) {
	eachConv(l, func(c *Conv2d) { c.prep.Reset() })
}

// eachConv calls fn on every convolution in l.
func eachConv(l Layer, fn func(*Conv2d)) {
	Walk(l, func(x Layer) {
		if c, ok := x.(*Conv2d); ok {
			fn(c)
		}
	})
}

// foldsBN reports whether a forward pass with gradients off would apply
// the batch norm after it (fuseConvBNs): paired, the batch norm
// evaluating. Only a container running the two one after the other with
// gradients off asks it to (foldNext), so that the batch norm's
// pass-through always follows the folded call it stands for.
func (c *Conv2d) foldsBN() bool {
	return c.bn != nil && c.bn.conv == c && !c.bn.P.Training
}

// Backward implements Layer.
func (c *Conv2d) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, c.y); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	dw, db := c.WeightGrad, c.BGrad
	if c.deferral.on {
		c.hold(dy, c.inputGrad.pool)
		dw, db = nil, nil
	}
	if c.NoInputGrad {
		if dw != nil {
			c.be.Conv2dBackward(c.x, c.Weight, dy, nil, dw, db, c.P)
		}
		return nil, nil
	}
	dx := c.dx.get(dy, c.x.Shape...)
	if c.keptLive {
		c.keepBE.Conv2dBackwardKept(&c.kept, c.x, c.Weight, dy, dx, dw, db, c.P)
	} else {
		c.be.Conv2dBackward(c.x, c.Weight, dy, dx, dw, db, c.P)
	}
	return dx, nil
}

// State implements Layer.
func (c *Conv2d) State() []Var {
	s := []Var{{Name: "weight", Value: c.Weight, Grad: c.WeightGrad}}
	if c.Bias != nil {
		s = append(s, Var{Name: "bias", Value: c.Bias, Grad: c.BGrad})
	}
	return s
}

// SetTraining implements Layer. It drops the prepared weights (Freeze).
func (c *Conv2d) SetTraining(training bool) {
	c.evaluating = !training
	c.prep.Reset()
}

// setNoGrad drops the prepared weights (Freeze) on every SetGradEnabled.
func (c *Conv2d) setNoGrad(bool) { c.prep.Reset() }

// Replica implements Layer: it shares the weights and their gradients.
func (c *Conv2d) Replica() Layer {
	r := *c
	r.x, r.y, r.inputGrad, r.result = nil, nil, inputGrad{}, result{}
	r.deferral = deferral{on: c.deferral.on}
	r.bn, r.fusedBN, r.foldNext = nil, nil, false // the replica's container pairs it anew
	r.saved = nil                                 // the replica's checkpoint sets its own
	r.residual, r.summed = nil, false
	r.offNext, r.prep, r.kept, r.keptLive = false, tensor.PreparedWeights{}, tensor.PreparedWeights{}, false
	return &r
}

// SkipInputGrad implements InputGradSkipper.
func (c *Conv2d) SkipInputGrad() { c.NoInputGrad = true }
