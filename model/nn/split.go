package nn

import (
	"errors"

	"github.com/gorun/gorun/model/tensor"
)

// Split backward. A layer's backward is two passes: the gradient of its
// input (B), which the layer before it waits for, and the gradients of its
// parameters (W), which nothing in the pass waits for. Zero-bubble
// pipeline schedules (Qi et al., ICLR 2024) send B's result on at once and
// run W later, in time a stage would otherwise spend waiting.
//
// DeferWeightGrads switches a network's convolutions and linear layers to
// leave W out of Backward; WeightGrads runs the passes left out. Until
// then each deferring layer keeps its output gradient: a pool buffer
// holding one is not lent again (bufferPool.put keeps it aside) until
// WeightGrads has run. The gradients are those of Backward without the
// split, bit for bit: the two passes make the same kernel calls.

// weightDeferrer is a layer whose parameter gradients can wait.
type weightDeferrer interface {
	deferWeights(on bool)
	// weightGrads runs the deferred pass, if one is pending, and returns
	// the output gradient it read and the pool whose buffer may hold it
	// (nil if none).
	weightGrads() (*tensor.Tensor, *bufferPool)
}

// deferral is a weightDeferrer's state.
type deferral struct {
	on   bool
	dy   *tensor.Tensor // the output gradient the pending pass reads; nil: none pending
	pool *bufferPool    // the pool that lent the call's buffers, if any
}

func (d *deferral) deferWeights(on bool) { d.on = on }

// errWeightsPending is a deferring layer's Forward or Backward before the
// weight pass its last Backward left: it would overwrite what the pass
// reads.
var errWeightsPending = errors.New("the weight gradients of the last backward pass are still pending (nn.WeightGrads runs them)")

// check refuses a pass while a weight pass is pending.
func (d *deferral) check() error {
	if d.dy != nil {
		return errWeightsPending
	}
	return nil
}

// hold records dy for the weight pass, keeping the pool's buffer that
// holds it out of circulation until the pass has run.
func (d *deferral) hold(dy *tensor.Tensor, pool *bufferPool) {
	d.dy, d.pool = dy, pool
	if pool != nil {
		pool.reads = append(pool.reads, dy)
	}
}

// take ends a pending pass: it returns the output gradient to read (nil
// when nothing is pending) and the pool to release afterwards.
func (d *deferral) take() (dy *tensor.Tensor, pool *bufferPool) {
	dy, pool = d.dy, d.pool
	d.dy, d.pool = nil, nil
	return dy, pool
}

// DeferWeightGrads makes Backward of every convolution and linear layer
// in l compute only its input gradient (on) until WeightGrads(l) computes
// the parameter gradients, or both again (off). Layers inside a
// Checkpoint keep both: their activations live only through the
// checkpoint's backward.
func DeferWeightGrads(l Layer, on bool) {
	switch x := l.(type) {
	case *Checkpoint:
		return
	case weightDeferrer:
		x.deferWeights(on)
	}
	if c, ok := l.(Container); ok {
		for _, ch := range c.Children() {
			DeferWeightGrads(ch, on)
		}
	}
}

// WeightGrads accumulates the parameter gradients that l's last Backward
// left out (DeferWeightGrads), then lends again the gradient buffers they
// held. Without a pending pass it does nothing.
func WeightGrads(l Layer) {
	for WeightGradsStep(l) {
	}
}

// WeightGradsStep runs one of l's pending weight passes (the first in
// forward order), lends again the buffers only it held, and reports
// whether it found one: a pipeline stage runs them one layer at a time
// while it waits for a neighbour, looking between layers whether the wait
// is over.
func WeightGradsStep(l Layer) bool {
	if d, ok := l.(weightDeferrer); ok {
		if dy, p := d.weightGrads(); dy != nil {
			if p != nil {
				p.unread(dy)
				p.releaseUnread()
			}
			return true
		}
	}
	if c, ok := l.(Container); ok {
		for _, ch := range c.Children() {
			if WeightGradsStep(ch) {
				return true
			}
		}
	}
	return false
}

// heldForLater reports whether b holds a gradient a deferred weight pass
// will read.
func (p *bufferPool) heldForLater(b *buffer) bool {
	for _, t := range p.reads {
		if b.holds(t) {
			return true
		}
	}
	return false
}

// unread strikes dy, read by its weight pass, off the pending reads.
func (p *bufferPool) unread(dy *tensor.Tensor) {
	for i, t := range p.reads {
		if t == dy {
			last := len(p.reads) - 1
			p.reads[i], p.reads[last] = p.reads[last], nil
			p.reads = p.reads[:last]
			return
		}
	}
}

// releaseUnread lends again the buffers kept for deferred weight passes
// that have all run (a pool shared by replicas may still keep others').
func (p *bufferPool) releaseUnread() {
	kept := p.later[:0]
	for _, b := range p.later {
		if p.heldForLater(b) {
			kept = append(kept, b)
		} else {
			p.recycle(b)
		}
	}
	clear(p.later[len(kept):])
	p.later = kept
}

func (c *Conv2d) weightGrads() (*tensor.Tensor, *bufferPool) {
	dy, pool := c.take()
	if dy != nil {
		c.be.Conv2dBackward(c.x, c.Weight, dy, nil, c.WeightGrad, c.BGrad, c.P)
	}
	return dy, pool
}

func (l *Linear) weightGrads() (*tensor.Tensor, *bufferPool) {
	dy, pool := l.take()
	if dy != nil {
		l.be.MatMul(dy, true, l.x, false, l.WeightGrad, 1, 1)
		l.be.BiasGrad(dy, l.BGrad)
	}
	return dy, pool
}
