package nn

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gorun/gorun/model/tensor"
)

// Chain runs named layers in order, like a PyTorch module whose forward
// calls its children one after another. Children named "" are stateless
// functional steps (F.relu, F.max_pool2d) that do not appear in the state,
// or groups — a Chain, or a Checkpoint of one — whose own children carry
// the names, which then appear unprefixed (a checkpointed run of a
// network's layers keeps their names).
type Chain struct {
	Names  []string
	Layers []Layer
	// GradReady, when set, is called during Backward after each child's
	// Backward: that child's parameter gradients are then final. DDP uses
	// it to start reducing them while the rest of backward runs.
	GradReady func(child Layer)
	// SliceImages, when above 0, has the chain, while it evaluates with
	// gradients off (inference), run an input of more images than that
	// in slices of at most SliceImages images, each through every layer
	// before the next: what the pass holds at once shrinks to a slice's
	// activations, and the outputs are the same bits, provided every
	// layer then treats each image on its own (as convolutions, linear
	// layers, pooling and evaluating batch norms and dropout do). Host
	// tensors only; an output target lent by an enclosing container
	// turns it off.
	SliceImages int
	evaluating  bool           // SetTraining(false) was the last call
	slice, ys   *tensor.Tensor // the slice's view of the input; the whole output
	yShape      []int
	lending
}

// Child is one entry of a Chain.
type Child struct {
	Name  string
	Layer Layer
}

// NewChain returns a chain of the given children.
func NewChain(children ...Child) *Chain {
	c := &Chain{}
	for _, ch := range children {
		c.Names = append(c.Names, ch.Name)
		c.Layers = append(c.Layers, ch.Layer)
	}
	return c
}

// NewSequential is torch.nn.Sequential: children are named by their index,
// stateless ones included, as PyTorch numbers them.
func NewSequential(layers ...Layer) *Chain {
	c := &Chain{}
	for i, l := range layers {
		c.Names = append(c.Names, strconv.Itoa(i))
		c.Layers = append(c.Layers, l)
	}
	return c
}

func (c *Chain) label(i int) string {
	if c.Names[i] != "" {
		return c.Names[i]
	}
	return fmt.Sprintf("step %d (%T)", i, c.Layers[i])
}

// Forward implements Layer.
func (c *Chain) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	if c.noGrad {
		giveBack(&c.keptOut)
		if c.slices(x) {
			return c.forwardSlices(x)
		}
		y, held, err := through(c.Layers, c.children.of(c.Layers), x, nil, c.outTarget, c.pool(), false, c.label, nil)
		c.keptOut = held
		return y, err
	}
	return forwardAll(c.Layers, c.children.of(c.Layers), x, c.outTarget, c.pool(), c.label, &c.acts)
}

// slices reports whether an evaluation pass with gradients off runs x in
// slices (SliceImages).
func (c *Chain) slices(x *tensor.Tensor) bool {
	return c.SliceImages > 0 && c.evaluating && c.outTarget == nil && x.Mem == nil &&
		x.Dims() > 1 && x.Shape[0] > c.SliceImages
}

// forwardSlices is Forward with gradients off over x's images in slices
// of at most SliceImages, each slice's output copied into place in the
// chain's own output tensor.
func (c *Chain) forwardSlices(x *tensor.Tensor) (*tensor.Tensor, error) {
	n := x.Shape[0]
	per := x.Len() / n
	pool := c.pool()
	for lo := 0; lo < n; lo += c.SliceImages {
		hi := min(n, lo+c.SliceImages)
		c.slice = viewRows(c.slice, x, lo, hi, per)
		y, held, err := through(c.Layers, c.children.of(c.Layers), c.slice, nil, nil, pool, false, c.label, nil)
		if err != nil {
			giveBack(&held)
			return nil, fmt.Errorf("images %d to %d: %w", lo, hi-1, err)
		}
		if y.Mem != nil || y.Dims() == 0 || y.Shape[0] != hi-lo {
			giveBack(&held)
			return nil, fmt.Errorf("nn: a chain evaluating in slices of %d images: images %d to %d gave %s, not one output per image in host memory", c.SliceImages, lo, hi-1, y)
		}
		if lo == 0 {
			c.yShape = append(append(c.yShape[:0], n), y.Shape[1:]...)
			tensor.Reuse(&c.ys, c.yShape...)
		}
		if !slices.Equal(y.Shape[1:], c.yShape[1:]) {
			giveBack(&held)
			return nil, fmt.Errorf("nn: a chain evaluating in slices of %d images: images %d to %d gave %s, after %s", c.SliceImages, lo, hi-1, y, c.ys)
		}
		yPer := y.Len() / (hi - lo)
		copy(c.ys.Data[lo*yPer:hi*yPer], y.Data)
		giveBack(&held)
	}
	return c.ys, nil
}

// viewRows returns images [lo, hi) of x, per elements each, in v's header
// (allocated when nil).
func viewRows(v, x *tensor.Tensor, lo, hi, per int) *tensor.Tensor {
	if v == nil {
		v = &tensor.Tensor{}
	}
	v.Data = x.Data[lo*per : hi*per]
	v.Shape = append(append(v.Shape[:0], hi-lo), x.Shape[1:]...)
	return v
}

// Backward implements Layer.
func (c *Chain) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	in := c.takeIn()
	giveBack(&c.kept)
	pool := c.pool()
	if c.noGrad {
		pool.put(in)
		return nil, errNoGrad
	}
	dx, held, err := through(c.Layers, c.children.of(c.Layers), dy, in, c.target, pool, true, c.label, c.GradReady)
	releaseActs(pool, c.acts) // the recomputed activations, read by now
	c.kept = held
	return dx, err
}

// State implements Layer.
func (c *Chain) State() []Var {
	var s []Var
	for i, l := range c.Layers {
		st := l.State()
		if len(st) == 0 {
			continue
		}
		switch {
		case c.Names[i] != "":
			s = append(s, prefixed(c.Names[i], st)...)
		case namesItsState(l):
			s = append(s, st...)
		default:
			panic(fmt.Sprintf("nn: unnamed chain step %d (%T) has state", i, l))
		}
	}
	return s
}

// SetTraining implements Layer.
func (c *Chain) SetTraining(training bool) {
	c.evaluating = !training
	for _, l := range c.Layers {
		l.SetTraining(training)
	}
}

// Children implements Container.
func (c *Chain) Children() []Layer { return c.Layers }

// Replica implements Layer: the children's replicas under the same names
// (without the GradReady hook, which belongs to the original).
func (c *Chain) Replica() Layer {
	r := &Chain{Names: c.Names, Layers: make([]Layer, len(c.Layers)), SliceImages: c.SliceImages, evaluating: c.evaluating}
	r.noGrad = c.noGrad
	for i, l := range c.Layers {
		r.Layers[i] = l.Replica()
	}
	return r
}

// SkipInputGrad implements InputGradSkipper: the chain's input is its
// first child's.
func (c *Chain) SkipInputGrad() {
	if len(c.Layers) > 0 {
		SkipInputGrad(c.Layers[0])
	}
}

// namesItsState reports whether l is a group whose children carry their
// own names: a chain, or a checkpoint of one.
func namesItsState(l Layer) bool {
	switch g := l.(type) {
	case *Chain:
		return true
	case *Checkpoint:
		return namesItsState(g.Inner)
	}
	return false
}
