package nn

import (
	"fmt"
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
		y, held, err := through(c.Layers, c.children.of(c.Layers), x, nil, c.outTarget, c.pool(), false, c.label, nil)
		c.keptOut = held
		return y, err
	}
	return forwardAll(c.Layers, c.children.of(c.Layers), x, c.outTarget, c.pool(), c.label, &c.acts)
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
	for _, l := range c.Layers {
		l.SetTraining(training)
	}
}

// Children implements Container.
func (c *Chain) Children() []Layer { return c.Layers }

// Replica implements Layer: the children's replicas under the same names
// (without the GradReady hook, which belongs to the original).
func (c *Chain) Replica() Layer {
	r := &Chain{Names: c.Names, Layers: make([]Layer, len(c.Layers))}
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
