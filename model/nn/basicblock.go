package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/gorun/gorun/model/tensor"
)

// BasicBlock is torchvision's ResNet BasicBlock: conv3×3 → bn → relu →
// conv3×3 → bn, plus the input (through Downsample, a 1×1 conv and bn, when
// the stride or width changes), then relu. State names: conv1, bn1, conv2,
// bn2, downsample.0, downsample.1.
type BasicBlock struct {
	be           tensor.Backend
	Conv1        *Conv2d
	BN1          *BatchNorm2d
	Relu1        *ReLU
	Conv2        *Conv2d
	BN2          *BatchNorm2d
	Downsample   *Chain // nil when the shortcut is the identity
	mainPath     [5]Layer
	sum, y, dsum *tensor.Tensor
	dx           *tensor.Tensor
}

// NewBasicBlock returns a block from in to out channels with the given
// stride of its first convolution.
func NewBasicBlock(be tensor.Backend, in, out, stride int, rng *rand.Rand) *BasicBlock {
	b := &BasicBlock{
		be:    be,
		Conv1: NewConv2d(be, in, out, 3, Conv2dOptions{Stride: stride, Padding: 1, NoBias: true}, rng),
		BN1:   NewBatchNorm2d(be, out),
		Relu1: NewReLU(be),
		Conv2: NewConv2d(be, out, out, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng),
		BN2:   NewBatchNorm2d(be, out),
	}
	b.mainPath = [5]Layer{b.Conv1, b.BN1, b.Relu1, b.Conv2, b.BN2}
	if stride != 1 || in != out {
		b.Downsample = NewSequential(NewConv2d(be, in, out, 1, Conv2dOptions{Stride: stride, NoBias: true}, rng), NewBatchNorm2d(be, out))
	}
	return b
}

func (b *BasicBlock) main() []Layer { return b.mainPath[:] }

// Children implements Container: the main path, then the downsample.
func (b *BasicBlock) Children() []Layer {
	ch := append([]Layer(nil), b.main()...)
	if b.Downsample != nil {
		ch = append(ch, b.Downsample)
	}
	return ch
}

// Replica implements Layer.
func (b *BasicBlock) Replica() Layer {
	r := &BasicBlock{
		be:    b.be,
		Conv1: b.Conv1.Replica().(*Conv2d),
		BN1:   b.BN1.Replica().(*BatchNorm2d),
		Relu1: b.Relu1.Replica().(*ReLU),
		Conv2: b.Conv2.Replica().(*Conv2d),
		BN2:   b.BN2.Replica().(*BatchNorm2d),
	}
	if b.Downsample != nil {
		r.Downsample = b.Downsample.Replica().(*Chain)
	}
	r.mainPath = [5]Layer{r.Conv1, r.BN1, r.Relu1, r.Conv2, r.BN2}
	return r
}

// Forward implements Layer.
func (b *BasicBlock) Forward(x *tensor.Tensor) (*tensor.Tensor, error) {
	h := x
	var err error
	for _, l := range b.main() {
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
func (b *BasicBlock) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	if err := sameShape(dy, b.y); err != nil {
		return nil, err
	}
	ds := tensor.ReuseLike(&b.dsum, dy, dy.Shape...)
	b.be.ReLUBackward(b.y, dy, ds)
	g := ds
	var err error
	main := b.main()
	for i := len(main) - 1; i >= 0; i-- {
		if g, err = main[i].Backward(g); err != nil {
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
func (b *BasicBlock) State() []Var {
	var s []Var
	s = append(s, prefixed("conv1", b.Conv1.State())...)
	s = append(s, prefixed("bn1", b.BN1.State())...)
	s = append(s, prefixed("conv2", b.Conv2.State())...)
	s = append(s, prefixed("bn2", b.BN2.State())...)
	if b.Downsample != nil {
		s = append(s, prefixed("downsample", b.Downsample.State())...)
	}
	return s
}

// SetTraining implements Layer.
func (b *BasicBlock) SetTraining(training bool) {
	for _, l := range b.main() {
		l.SetTraining(training)
	}
	if b.Downsample != nil {
		b.Downsample.SetTraining(training)
	}
}
