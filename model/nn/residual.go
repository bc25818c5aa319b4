package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/gorun/gorun/model/tensor"
)

// Residual is a ResNet block: a main path of layers, plus the input
// (through Downsample, a 1×1 convolution and batch norm, when the stride or
// width changes), then relu. torchvision's BasicBlock and Bottleneck are
// residual blocks (NewBasicBlock, NewBottleneck); the state names are
// theirs: the main path's named layers (conv1, bn1, …), then
// downsample.0, downsample.1.
type Residual struct {
	be         tensor.Backend
	Main       []Child // the main path in order; relus are unnamed
	Downsample *Chain  // nil when the shortcut is the identity
	main       []Layer
	sum, y     *tensor.Tensor
	dsum, dx   *tensor.Tensor
}

// NewBasicBlock returns torchvision's BasicBlock from in to out channels:
// conv3×3 (stride) → bn → relu → conv3×3 → bn.
func NewBasicBlock(be tensor.Backend, in, out, stride int, rng *rand.Rand) *Residual {
	return newResidual(be, in, out, stride, rng, []Child{
		{"conv1", NewConv2d(be, in, out, 3, Conv2dOptions{Stride: stride, Padding: 1, NoBias: true}, rng)},
		{"bn1", NewBatchNorm2d(be, out)},
		{"", NewReLU(be)},
		{"conv2", NewConv2d(be, out, out, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng)},
		{"bn2", NewBatchNorm2d(be, out)},
	})
}

// BottleneckExpansion is how many times wider a Bottleneck's output is
// than its inner width.
const BottleneckExpansion = 4

// NewBottleneck returns torchvision's Bottleneck (ResNet v1.5: the stride
// in the 3×3 convolution) from in channels through width to
// width·BottleneckExpansion: conv1×1 → bn → relu → conv3×3 (stride) → bn →
// relu → conv1×1 → bn.
func NewBottleneck(be tensor.Backend, in, width, stride int, rng *rand.Rand) *Residual {
	out := width * BottleneckExpansion
	return newResidual(be, in, out, stride, rng, []Child{
		{"conv1", NewConv2d(be, in, width, 1, Conv2dOptions{NoBias: true}, rng)},
		{"bn1", NewBatchNorm2d(be, width)},
		{"", NewReLU(be)},
		{"conv2", NewConv2d(be, width, width, 3, Conv2dOptions{Stride: stride, Padding: 1, NoBias: true}, rng)},
		{"bn2", NewBatchNorm2d(be, width)},
		{"", NewReLU(be)},
		{"conv3", NewConv2d(be, width, out, 1, Conv2dOptions{NoBias: true}, rng)},
		{"bn3", NewBatchNorm2d(be, out)},
	})
}

func newResidual(be tensor.Backend, in, out, stride int, rng *rand.Rand, main []Child) *Residual {
	b := &Residual{be: be, Main: main}
	if stride != 1 || in != out {
		b.Downsample = NewSequential(NewConv2d(be, in, out, 1, Conv2dOptions{Stride: stride, NoBias: true}, rng), NewBatchNorm2d(be, out))
	}
	b.index()
	return b
}

func (b *Residual) index() {
	b.main = make([]Layer, len(b.Main))
	for i, c := range b.Main {
		b.main[i] = c.Layer
	}
}

// LastBN is the main path's last batch norm: torchvision's
// zero_init_residual sets its weight to zero, so that the block starts as
// the identity.
func (b *Residual) LastBN() *BatchNorm2d {
	for i := len(b.main) - 1; i >= 0; i-- {
		if bn, ok := b.main[i].(*BatchNorm2d); ok {
			return bn
		}
	}
	return nil
}

// Children implements Container: the main path, then the downsample.
func (b *Residual) Children() []Layer {
	ch := append([]Layer(nil), b.main...)
	if b.Downsample != nil {
		ch = append(ch, b.Downsample)
	}
	return ch
}

// Replica implements Layer.
func (b *Residual) Replica() Layer {
	r := &Residual{be: b.be, Main: make([]Child, len(b.Main))}
	for i, c := range b.Main {
		r.Main[i] = Child{Name: c.Name, Layer: c.Layer.Replica()}
	}
	if b.Downsample != nil {
		r.Downsample = b.Downsample.Replica().(*Chain)
	}
	r.index()
	return r
}

// Forward implements Layer.
func (b *Residual) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	h := x
	var err error
	for _, l := range b.main {
		if h, err = l.Forward(h); err != nil {
			return nil, err
		}
	}
	short := x
	if b.Downsample != nil {
		if short, err = b.Downsample.Forward(x); err != nil {
			return nil, fmt.Errorf("downsample: %w", err)
		}
	}
	sum := tensor.ReuseLike(&b.sum, h, h.Shape...)
	b.be.Add(h, short, sum)
	y := tensor.ReuseLike(&b.y, h, h.Shape...)
	b.be.ReLU(sum, y)
	return y, nil
}

// Backward implements Layer.
func (b *Residual) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, b.y); err != nil {
		return nil, err
	}
	ds := tensor.ReuseLike(&b.dsum, dy, dy.Shape...)
	b.be.ReLUBackward(b.y, dy, ds)
	g := ds
	var err error
	for i := len(b.main) - 1; i >= 0; i-- {
		if g, err = b.main[i].Backward(g); err != nil {
			return nil, err
		}
	}
	gs := ds
	if b.Downsample != nil {
		if gs, err = b.Downsample.Backward(ds); err != nil {
			return nil, fmt.Errorf("downsample backward: %w", err)
		}
	}
	dx := tensor.ReuseLike(&b.dx, g, g.Shape...)
	b.be.Add(g, gs, dx)
	return dx, nil
}

// State implements Layer.
func (b *Residual) State() []Var {
	var s []Var
	for _, c := range b.Main {
		if c.Name != "" {
			s = append(s, prefixed(c.Name, c.Layer.State())...)
		}
	}
	if b.Downsample != nil {
		s = append(s, prefixed("downsample", b.Downsample.State())...)
	}
	return s
}

// SetTraining implements Layer.
func (b *Residual) SetTraining(training bool) {
	for _, l := range b.main {
		l.SetTraining(training)
	}
	if b.Downsample != nil {
		b.Downsample.SetTraining(training)
	}
}
