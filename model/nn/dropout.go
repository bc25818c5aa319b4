package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

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
	y         *tensor.Tensor // the last output (x itself in evaluation)
	inputGrad
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
	calls := d.counter()
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
	dx := d.dx.get(dy, dy.Shape...)
	d.be.Mul(dy, d.mask, dx)
	return dx, nil
}

// counter is the call counter this layer advances: its own, or for a
// replica its original's.
func (d *Dropout) counter() *uint64 {
	if d.calls != nil {
		return d.calls
	}
	return &d.Calls
}

// Replica implements Layer: the replica draws from the same call counter,
// so every microbatch gets its own mask.
func (d *Dropout) Replica() Layer {
	r := &Dropout{be: d.be, P: d.P, Seed: d.Seed, training: d.training, calls: d.calls}
	if r.calls == nil {
		r.calls = &d.Calls
	}
	return r
}
