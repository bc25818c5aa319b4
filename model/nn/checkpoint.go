package nn

import (
	"fmt"
	"slices"

	"github.com/gorun/gorun/model/tensor"
)

// Checkpoint is activation checkpointing (torch.utils.checkpoint) around
// one layer, typically a residual block: its forward pass runs the layer
// with gradients off, keeping only the input and the output (and the
// outputs of the convolutions Save names), and its backward pass first
// runs the layer's forward again to rebuild the activations (taking
// those outputs as they were), then its backward. A residual block whose
// paths end in batch norms (torchvision's) is rebuilt only up to what
// its backward reads: those batch norms' inputs; its output, which their
// normalisations, the sum and the relu would make again, is the stored
// one. Memory for the layer's
// activations is then needed for one checkpointed layer at a time, for
// up to a third more arithmetic (one more forward pass, less what Save
// spares). Results, gradients and the
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
	inner   caps
	// What the inner layer has that a recomputation must leave as the
	// first pass left it, found once (State and Walk allocate): its
	// buffers and counters, and its dropout layers.
	bufVars  []Var
	dropouts []*Dropout
	norms    []*BatchNorm2d // its batch norms, which the recomputation replays
	// saves are the saved outputs of the convolutions Save named.
	saves []*savedOutput
	lending
}

// NewCheckpoint wraps inner in activation checkpointing.
func NewCheckpoint(be tensor.Backend, inner Layer) *Checkpoint {
	c := &Checkpoint{be: be, Inner: inner}
	c.innerCaps()
	return c
}

// innerCaps returns the inner layer's caps, looked up again, with its
// buffers and dropout layers, if Inner changed.
func (c *Checkpoint) innerCaps() *caps {
	if !c.inner.comparable || c.inner.layer != c.Inner {
		c.inner = capsOf(c.Inner)
		c.bufVars, c.dropouts, c.norms = c.bufVars[:0], c.dropouts[:0], c.norms[:0]
		for _, v := range c.Inner.State() {
			if v.Count != nil || (v.Grad == nil && v.Value != nil) {
				c.bufVars = append(c.bufVars, v)
			}
		}
		Walk(c.Inner, func(l Layer) {
			switch l := l.(type) {
			case *Dropout:
				c.dropouts = append(c.dropouts, l)
			case *BatchNorm2d:
				c.norms = append(c.norms, l)
			}
		})
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
	c.releaseSaved()
	c.store = pool.get()
	c.innerCaps().lendOut(c.store, pool)
	defer c.innerCaps().lendOut(nil, nil)
	c.setSaves(saveRecord, pool)
	y, err := c.Inner.Forward(x)
	c.setSaves(saveOff, pool)
	if err != nil {
		giveBack(&c.store)
		c.releaseSaved()
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
	defer c.releaseSaved() // read by the inner layer's backward, not after
	if c.noGrad {
		pool.put(in)
		return nil, errNoGrad
	}
	if err := sameShape(dy, c.y); err != nil {
		pool.put(in)
		return nil, err
	}
	defer giveBack(&c.store) // unless the inner layer took it
	// Recompute: the same input and dropout masks, and the batch norms
	// normalising with the batch statistics of the first pass, give the
	// same activations, which this time stay (in pool buffers) for
	// backward; the output, the same bits again, goes over the stored one
	// — or, for a layer that can take it (outputKnower: a residual
	// block), is taken as stored.
	c.restoreDropouts()
	pool.recomputing = true
	c.innerCaps().lendOut(c.store, pool)
	c.setSaves(saveReplay, pool)
	c.replayNorms(true)
	k, known := c.Inner.(outputKnower)
	if known {
		k.knowOutput(c.y) // what the recomputation would make again
	}
	y, err := c.Inner.Forward(c.x)
	if known {
		k.knowOutput(nil)
	}
	c.replayNorms(false)
	c.setSaves(saveOff, pool)
	c.innerCaps().lendOut(nil, nil)
	pool.recomputing = false
	c.restoreBuffers()
	if err != nil {
		pool.put(in)
		return nil, fmt.Errorf("recomputing: %w", err)
	}
	c.innerCaps().lend(c.target, pool, in)
	defer c.innerCaps().lend(nil, nil, nil)
	if c.store.holds(y) && c.innerCaps().handOut(c.store) {
		c.store = nil // the inner layer gives it back once read
	}
	return c.Inner.Backward(dy)
}

// outputKnower is a layer whose recomputation, told the output its first
// pass made (the Checkpoint's stored one), can stop at what its backward
// reads and take that output as its own (Residual).
type outputKnower interface {
	// knowOutput sets the output the next Forward may take as its own,
	// or with nil clears it.
	knowOutput(y *tensor.Tensor)
}

// Save makes the checkpoint keep the outputs of convs, convolutions
// inside its layer, from its first pass until its backward is done, so
// that the recomputation does not run them again: their outputs' memory
// held through the step for their forward arithmetic. Results stay the
// same, bit for bit.
func (c *Checkpoint) Save(convs ...*Conv2d) error {
	for _, conv := range convs {
		inside := false
		Walk(c.Inner, func(l Layer) { inside = inside || l == Layer(conv) })
		switch {
		case !inside:
			return fmt.Errorf("nn: saving the output of a convolution (%d to %d channels) that is not inside the checkpointed layer", conv.In, conv.Out)
		case conv.saved != nil && !slices.Contains(c.saves, conv.saved):
			return fmt.Errorf("nn: saving the output of a convolution (%d to %d channels) that another checkpoint saves", conv.In, conv.Out)
		case conv.saved != nil:
			continue // saved already
		}
		conv.saved = &savedOutput{}
		c.saves = append(c.saves, conv.saved)
	}
	return nil
}

// setSaves sets the phase of every saved output, with the pool they take
// their storage from.
func (c *Checkpoint) setSaves(phase savePhase, pool *bufferPool) {
	for _, s := range c.saves {
		s.phase, s.pool = phase, pool
	}
}

// replayNorms sets whether the inner batch norms normalise with the
// statistics their last training pass computed (the first pass's).
func (c *Checkpoint) replayNorms(on bool) {
	for _, b := range c.norms {
		b.replay = on
	}
}

// releaseSaved gives the saved outputs' storage back to the pool.
func (c *Checkpoint) releaseSaved() {
	for _, s := range c.saves {
		s.release()
	}
}

// saveDropouts records the inner dropout layers' call counters, so that
// the recomputation draws the same masks.
func (c *Checkpoint) saveDropouts() {
	c.drops = c.drops[:0]
	c.innerCaps() // the dropout list up to date
	for _, d := range c.dropouts {
		c.drops = append(c.drops, *d.counter())
	}
}

func (c *Checkpoint) restoreDropouts() {
	c.innerCaps()
	for i, d := range c.dropouts {
		*d.counter() = c.drops[i]
	}
}

// saveBuffers records the inner layer's buffers and counters after the
// first forward pass; the recomputation would update them a second time.
func (c *Checkpoint) saveBuffers() {
	c.innerCaps() // the buffer list up to date
	i, j := 0, 0
	for _, v := range c.bufVars {
		switch {
		case v.Count != nil:
			if j == len(c.counts) {
				c.counts = append(c.counts, 0)
			}
			c.counts[j] = *v.Count
			j++
		default:
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
	c.innerCaps() // the buffer list up to date
	i, j := 0, 0
	for _, v := range c.bufVars {
		switch {
		case v.Count != nil:
			*v.Count = c.counts[j]
			j++
		default:
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
	if len(c.saves) > 0 {
		// The replica's layers, in the same order, save the same outputs.
		var mine, theirs []Layer
		Walk(c.Inner, func(l Layer) { mine = append(mine, l) })
		Walk(r.Inner, func(l Layer) { theirs = append(theirs, l) })
		for i, l := range mine {
			if conv, ok := l.(*Conv2d); ok && conv.saved != nil && slices.Contains(c.saves, conv.saved) {
				r.Save(theirs[i].(*Conv2d)) // inside r.Inner by construction
			}
		}
	}
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

// CheckpointSteps puts steps [lo, hi) of c under one Checkpoint, which
// takes their place as an unnamed step of c: a chain of them whose state
// keeps their names, so c's state does not change. A network's stem, the
// layers before its first residual block, is checkpointed so.
func CheckpointSteps(be tensor.Backend, c *Chain, lo, hi int) error {
	if lo < 0 || hi > len(c.Layers) || lo >= hi {
		return fmt.Errorf("nn: checkpointing steps [%d, %d) of a chain of %d", lo, hi, len(c.Layers))
	}
	steps := make([]Child, 0, hi-lo)
	for i := lo; i < hi; i++ {
		steps = append(steps, Child{Name: c.Names[i], Layer: c.Layers[i]})
	}
	c.Names = append(append(c.Names[:lo:lo], ""), c.Names[hi:]...)
	c.Layers = append(append(c.Layers[:lo:lo], NewCheckpoint(be, NewChain(steps...))), c.Layers[hi:]...)
	return nil
}
