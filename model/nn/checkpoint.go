package nn

import (
	"fmt"

	"github.com/gorun/gorun/model/tensor"
)

// Checkpoint is activation checkpointing (torch.utils.checkpoint) around
// one layer, typically a residual block: its forward pass runs the layer
// with gradients off, keeping only the input and the output, and its
// backward pass first runs the layer's forward again to rebuild the
// activations, then its backward. Memory for the layer's activations is
// then needed for one checkpointed layer at a time, for about a third
// more arithmetic (one more forward pass). Results, gradients and the
// layer's buffers (batch norm's running statistics, counted once per
// step) are the same as without it, bit for bit.
//
// A checkpoint's state is its layer's, under the same names.
type Checkpoint struct {
	be    tensor.Backend
	Inner Layer
	x, y  *tensor.Tensor
	// store holds the output from forward until backward, lent by the
	// network's pool and given back once backward is done: the layers
	// after it have run their backward by then, and its storage serves
	// the recomputations and gradients of the layers before it.
	store *buffer
	// The inner layer's buffers after the first forward pass, restored
	// after the recomputation; the dropout counters before it.
	buffers []*tensor.Tensor
	counts  []int64
	drops   []uint64
	rebuilt []*buffer // the recomputed activations, given back after backward
	inner   caps
	lending
}

// NewCheckpoint wraps inner in activation checkpointing.
func NewCheckpoint(be tensor.Backend, inner Layer) *Checkpoint {
	return &Checkpoint{be: be, Inner: inner, inner: capsOf(inner)}
}

// innerCaps returns the inner layer's caps, looked up again if Inner changed.
func (c *Checkpoint) innerCaps() *caps {
	if !c.inner.comparable || c.inner.layer != c.Inner {
		c.inner = capsOf(c.Inner)
	}
	return &c.inner
}

// Forward implements Layer.
func (c *Checkpoint) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	pool := c.pool()
	if c.noGrad {
		c.innerCaps().lendOut(c.outTarget, pool)
		defer c.innerCaps().lendOut(nil, nil)
		return c.Inner.Forward(x)
	}
	c.saveDropouts()
	SetGradEnabled(c.Inner, false)
	defer SetGradEnabled(c.Inner, true)
	giveBack(&c.store) // a forward pass that no backward followed
	c.store = pool.get()
	c.innerCaps().lendOut(c.store, pool)
	defer c.innerCaps().lendOut(nil, nil)
	y, err := c.Inner.Forward(x)
	if err != nil {
		giveBack(&c.store)
		return nil, err
	}
	if !c.store.holds(y) {
		// The layer passed its input through: keep a copy.
		pool.fit(c.store, y, y.Len())
		s := tensor.ReuseLike(&c.store.t, y, y.Len())
		c.be.Copy(y, s)
		if y, err = tensor.View(&c.y, s, y.Shape...); err != nil {
			return nil, err
		}
	}
	c.x, c.y = x, y
	c.saveBuffers()
	return y, nil
}

// Backward implements Layer.
func (c *Checkpoint) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	pool := c.pool()
	in := c.takeIn()
	if c.noGrad {
		pool.put(in)
		return nil, errNoGrad
	}
	if err := sameShape(dy, c.y); err != nil {
		pool.put(in)
		return nil, err
	}
	defer c.release(pool)
	// Recompute: the same input, dropout masks and batch statistics give
	// the same activations, which this time stay (in pool buffers) for
	// backward; the output, the same bits again, goes over the stored one.
	c.restoreDropouts()
	pool.retain = &c.rebuilt
	c.innerCaps().lendOut(c.store, pool)
	_, err := c.Inner.Forward(c.x)
	c.innerCaps().lendOut(nil, nil)
	pool.retain = nil
	c.restoreBuffers()
	if err != nil {
		pool.put(in)
		return nil, fmt.Errorf("recomputing: %w", err)
	}
	c.innerCaps().lend(c.target, pool, in)
	defer c.innerCaps().lend(nil, nil, nil)
	return c.Inner.Backward(dy)
}

// release returns the recomputed activations' buffers and the stored
// output to the pool.
func (c *Checkpoint) release(pool *bufferPool) {
	for _, b := range c.rebuilt {
		pool.put(b)
	}
	c.rebuilt = c.rebuilt[:0]
	giveBack(&c.store)
}

// saveDropouts records the inner dropout layers' call counters, so that
// the recomputation draws the same masks.
func (c *Checkpoint) saveDropouts() {
	c.drops = c.drops[:0]
	Walk(c.Inner, func(l Layer) {
		if d, ok := l.(*Dropout); ok {
			c.drops = append(c.drops, *d.counter())
		}
	})
}

func (c *Checkpoint) restoreDropouts() {
	i := 0
	Walk(c.Inner, func(l Layer) {
		if d, ok := l.(*Dropout); ok {
			*d.counter() = c.drops[i]
			i++
		}
	})
}

// saveBuffers records the inner layer's buffers and counters after the
// first forward pass; the recomputation would update them a second time.
func (c *Checkpoint) saveBuffers() {
	i, j := 0, 0
	for _, v := range c.Inner.State() {
		switch {
		case v.Count != nil:
			if j == len(c.counts) {
				c.counts = append(c.counts, 0)
			}
			c.counts[j] = *v.Count
			j++
		case v.Grad == nil && v.Value != nil:
			if i == len(c.buffers) {
				c.buffers = append(c.buffers, nil)
			}
			s := tensor.ReuseLike(&c.buffers[i], v.Value, v.Value.Shape...)
			c.be.Copy(v.Value, s)
			i++
		}
	}
}

func (c *Checkpoint) restoreBuffers() {
	i, j := 0, 0
	for _, v := range c.Inner.State() {
		switch {
		case v.Count != nil:
			*v.Count = c.counts[j]
			j++
		case v.Grad == nil && v.Value != nil:
			c.be.Copy(c.buffers[i], v.Value)
			i++
		}
	}
}

// State implements Layer: the inner layer's, unprefixed.
func (c *Checkpoint) State() []Var { return c.Inner.State() }

// SetTraining implements Layer.
func (c *Checkpoint) SetTraining(training bool) { c.Inner.SetTraining(training) }

// Children implements Container.
func (c *Checkpoint) Children() []Layer { return []Layer{c.Inner} }

// Replica implements Layer.
func (c *Checkpoint) Replica() Layer {
	r := NewCheckpoint(c.be, c.Inner.Replica())
	r.noGrad = c.noGrad
	return r
}

// CheckpointBlocks wraps every residual block inside l (a chain or
// sequential of them, at any depth) in a Checkpoint and returns how many
// it wrapped.
func CheckpointBlocks(be tensor.Backend, l Layer) int {
	n := 0
	var wrap func(Layer)
	wrap = func(l Layer) {
		c, ok := l.(*Chain)
		if !ok {
			return
		}
		for i, ch := range c.Layers {
			if r, ok := ch.(*Residual); ok {
				c.Layers[i] = NewCheckpoint(be, r)
				n++
				continue
			}
			wrap(ch)
		}
	}
	wrap(l)
	return n
}
