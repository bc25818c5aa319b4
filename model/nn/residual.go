package nn

import (
	"fmt"
	"math/rand/v2"
	"slices"

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
	addReLU    tensor.AddReLUBackend // be, when it adds and applies the relu in one pass
	Main       []Child               // the main path in order; relus are unnamed
	Downsample *Chain                // nil when the shortcut is the identity
	main       []Layer
	kids       []Layer // Children's result
	sum, y     *tensor.Tensor
	ds, dx     output // the gradients of the sum and of the input
	// outBuf, when a Checkpoint hands it over for one Backward call, is
	// the pool buffer holding the block's output (y), the block's to give
	// back as soon as backward has read y: the sum's gradient then goes
	// over it or the pool has it for the gradients of the layers below.
	outBuf *buffer
	// knownOut, set by a Checkpoint while it recomputes this block, is
	// the block's output as the first pass left it: the recomputation
	// then stops at what Backward reads (the batch norms ending the
	// paths keep their inputs, endNorms), without the normalisations,
	// the sum and the relu that would only make it again.
	knownOut *tensor.Tensor
	ends     []*BatchNorm2d // endNorms' result, reused
	lending
}

// NewBasicBlock returns torchvision's BasicBlock from in to out channels:
// conv3×3 (stride) → bn → relu → conv3×3 → bn.
func NewBasicBlock(be tensor.Backend, in, out, stride int, rng *rand.Rand) *Residual {
	return newResidual(be, in, out, stride, rng, []Child{
		{"conv1", NewConv2d(be, in, out, 3, Conv2dOptions{Stride: stride, Padding: 1, NoBias: true}, rng)},
		{"bn1", NewBatchNorm2d(be, out)},
		{"", NewReLUInPlace(be)},
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
		{"", NewReLUInPlace(be)},
		{"conv2", NewConv2d(be, width, width, 3, Conv2dOptions{Stride: stride, Padding: 1, NoBias: true}, rng)},
		{"bn2", NewBatchNorm2d(be, width)},
		{"", NewReLUInPlace(be)},
		{"conv3", NewConv2d(be, width, out, 1, Conv2dOptions{NoBias: true}, rng)},
		{"bn3", NewBatchNorm2d(be, out)},
	})
}

func newResidual(be tensor.Backend, in, out, stride int, rng *rand.Rand, main []Child) *Residual {
	b := &Residual{be: be, Main: main}
	b.addReLU, _ = be.(tensor.AddReLUBackend)
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
//
// The slice is the block's, rebuilt in place on every call (no
// allocation: a checkpoint walks its block twice a step).
func (b *Residual) Children() []Layer {
	b.kids = append(b.kids[:0], b.main...)
	if b.Downsample != nil {
		b.kids = append(b.kids, b.Downsample)
	}
	return b.kids
}

// Replica implements Layer.
func (b *Residual) Replica() Layer {
	r := &Residual{be: b.be, addReLU: b.addReLU, Main: make([]Child, len(b.Main))}
	r.noGrad = b.noGrad
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
	if b.knownOut == nil || b.noGrad {
		return b.forward(x, nil)
	}
	ends := b.endNorms()
	for _, bn := range ends {
		bn.inputOnly = true
	}
	y, err := b.forward(x, ends)
	for _, bn := range ends {
		bn.inputOnly = false
	}
	return y, err
}

// forward is Forward, ends the batch norms ending its paths when they
// are to keep only their inputs (knownOut).
func (b *Residual) forward(x *tensor.Tensor, ends []*BatchNorm2d) (*tensor.Tensor, error) {
	var pool *bufferPool
	var h *tensor.Tensor
	var err error
	if b.noGrad {
		// Outputs are dead once read: the main path and the shortcut
		// borrow from the network's pool, and the block's output goes
		// where its caller lent.
		giveBack(&b.keptOut)
		pool = b.pool()
		caps := b.children.of(b.main) // pairs each convolution with its batch norm
		last := b.summingConv()
		if last != nil {
			last.residual = x
		}
		h, b.keptOut, err = through(b.main, caps, x, nil, b.outTarget, pool, false, b.label, nil)
		if last != nil {
			last.residual = nil
			if err == nil && last.summed {
				b.y = h // the sum and relu are done
				return h, nil
			}
		}
	} else {
		pool = b.pool()
		h, err = forwardAll(b.main, b.children.of(b.main), x, b.outTarget, pool, b.label, &b.acts)
	}
	if err != nil {
		return nil, err
	}
	short := x
	if b.Downsample != nil {
		// The shortcut's output is dead once added, unless its last
		// layer's backward reads it: it then borrows from the pool.
		var dBuf *buffer
		if b.noGrad || b.shortcutOutputDead() {
			dBuf = pool.get()
			defer pool.put(dBuf)
		}
		b.Downsample.borrowOut(dBuf, pool)
		defer b.Downsample.borrowOut(nil, nil)
		if short, err = b.Downsample.Forward(x); err != nil {
			return nil, fmt.Errorf("downsample: %w", err)
		}
	}
	if kept, err := b.keptInputs(ends, h); kept || err != nil {
		return b.y, err
	}
	// The sum and relu overwrite the main path's output when nothing
	// reads it afterwards: in evaluation, or when its last layer's
	// backward does not (a batch norm, as in torchvision's blocks, whose
	// out += identity; relu(out) is in place too).
	sum := h
	unread := b.children.of(b.main)[len(b.main)-1].unread
	if (!unread && !b.noGrad) || tensor.Overlaps(h, x) || tensor.Overlaps(h, short) {
		sum = tensor.ReuseLike(&b.sum, h, h.Shape...)
	}
	if b.addReLU != nil {
		b.addReLU.AddReLU(h, short, sum)
	} else {
		b.be.Add(h, short, sum)
		b.be.ReLU(sum, sum)
	}
	b.y = sum
	return sum, nil
}

// summingConv returns the main path's last convolution when it may end
// the block itself — the shortcut the identity, the path ending in that
// convolution and the batch norm it folds, on a backend that adds a
// residual to a prepared convolution's output (tensor.ResidualConvBackend):
// each image's sum and relu then follow its convolution while its output
// is in cache, where a pass of their own over the whole output read it
// back from memory (ResNet-50's layer1: three 25 MB arrays a slice of
// eight images). Else nil. The convolution says whether it did (summed):
// it adds only in a prepared evaluation.
func (b *Residual) summingConv() *Conv2d {
	n := len(b.main)
	if b.Downsample != nil || n < 2 {
		return nil
	}
	conv, ok := b.main[n-2].(*Conv2d)
	if !ok || conv.resBE == nil || conv.bn == nil || conv.bn != b.main[n-1] {
		return nil
	}
	return conv
}

// knowOutput implements outputKnower.
func (b *Residual) knowOutput(y *tensor.Tensor) { b.knownOut = y }

// endNorms returns the batch norms that end the main path and the
// downsample, when both paths end in one (torchvision's blocks), else
// nil.
func (b *Residual) endNorms() []*BatchNorm2d {
	last := func(layers []Layer) *BatchNorm2d {
		if len(layers) == 0 {
			return nil
		}
		bn, _ := layers[len(layers)-1].(*BatchNorm2d)
		return bn
	}
	main := last(b.main)
	if main == nil {
		return nil
	}
	b.ends = append(b.ends[:0], main)
	if b.Downsample == nil {
		return b.ends
	}
	if ds := last(b.Downsample.Layers); ds != nil {
		b.ends = append(b.ends, ds)
		return b.ends
	}
	return nil
}

// keptInputs reports whether the batch norms ending the paths kept only
// their inputs (a recomputation knowing the block's output, knownOut),
// and then sets the block's output to knownOut. Some keeping and some
// not would leave no sum to make: an error.
func (b *Residual) keptInputs(ends []*BatchNorm2d, h *tensor.Tensor) (bool, error) {
	if b.knownOut == nil || len(ends) == 0 {
		return false, nil
	}
	kept := 0
	for _, bn := range ends {
		if bn.keptInput {
			kept++
		}
	}
	switch {
	case kept == 0:
		return false, nil
	case kept < len(ends) || !slices.Equal(h.Shape, b.knownOut.Shape):
		return false, fmt.Errorf("recomputing a residual block: its paths replayed unlike its first pass (%d of %d batch norms with their statistics; output %v, first pass %v)", kept, len(ends), h.Shape, b.knownOut.Shape)
	}
	b.y = b.knownOut
	return true, nil
}

// takeOutput implements outputTaker.
func (b *Residual) takeOutput(buf *buffer) { b.outBuf = buf }

// shortcutOutputDead reports whether the downsample's backward does not
// read its output (its last layer's does not), which is then dead once
// added to the main path's.
func (b *Residual) shortcutOutputDead() bool {
	ds := b.Downsample.children.of(b.Downsample.Layers)
	return len(ds) > 0 && ds[len(ds)-1].unread
}

// forwardAll runs x through layers in order with gradients on. Each layer
// keeps its output for backward: in its own storage or, while the pool
// recomputes (a Checkpoint rebuilding its layer's activations), in a pool
// buffer held in the layer's slot of acts, the container's, which gives
// them back when its backward is done (releaseActs). The last layer
// writes into final, the caller's, when it is set.
func forwardAll(layers []Layer, cs []caps, x *tensor.Tensor, final *buffer, pool *bufferPool, label func(int) string, acts *[]*buffer) (*tensor.Tensor, error) {
	releaseActs(pool, *acts) // a pass no backward followed
	if pool.recomputing && len(*acts) < len(layers) {
		*acts = make([]*buffer, len(layers))
	}
	for i, l := range layers {
		var out *buffer
		switch {
		case i == len(layers)-1 && final != nil:
			out = final // the caller's: neither kept nor given back here
		case pool.recomputing:
			out = pool.get()
		}
		cs[i].lendOut(out, pool)
		y, err := l.Forward(x)
		cs[i].lendOut(nil, nil)
		if out == final {
			out = nil
		}
		if err != nil {
			pool.put(out)
			releaseActs(pool, *acts)
			return nil, fmt.Errorf("%s: %w", label(i), err)
		}
		if out != nil {
			if out.holds(y) {
				(*acts)[i] = out
			} else {
				pool.put(out) // unused: an in-place or pass-through layer
			}
		}
		x = y
	}
	return x, nil
}

// releaseActs gives every recomputed activation still held in acts back
// to the pool.
func releaseActs(pool *bufferPool, acts []*buffer) {
	for i, b := range acts {
		if b != nil {
			pool.put(b)
			acts[i] = nil
		}
	}
}

// Backward implements Layer.
func (b *Residual) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	pool := b.pool()
	defer releaseActs(pool, b.acts) // the recomputed activations, read by now
	in := b.takeIn()
	outBuf := b.outBuf
	b.outBuf = nil
	if err := sameShape(dy, b.y); err != nil {
		pool.put(in)
		pool.put(outBuf)
		return nil, err
	}
	if b.noGrad {
		pool.put(in)
		pool.put(outBuf)
		return nil, errNoGrad
	}
	// ds, the sum's gradient, overwrites dy when dy's buffer was given,
	// else the output (read element by element just before) when its
	// buffer was handed over.
	ds, dsBuf := dy, in
	if !in.holds(dy) {
		pool.put(in)
		if outBuf.holds(b.y) {
			dsBuf, outBuf = outBuf, nil
		} else {
			dsBuf = pool.get()
		}
		b.ds.lent = dsBuf
		ds = b.ds.get(dy, dy.Shape...)
	}
	b.be.ReLUBackward(b.y, dy, ds)
	pool.put(outBuf) // the output is dead now
	// ds feeds both paths. The shortcut goes first: its gradient is the
	// block input's size, often a quarter of ds's, and ds's buffer can
	// then go down the main path, which gives it back as soon as it is
	// read. Without a downsample, the shortcut's gradient is ds itself.
	gs, mainIn := ds, (*buffer)(nil)
	if b.Downsample != nil {
		dBuf := pool.get()
		defer pool.put(dBuf)
		b.Downsample.borrow(dBuf, pool, nil)
		var err error
		gs, err = b.Downsample.Backward(ds)
		b.Downsample.borrow(nil, nil, nil)
		if err != nil {
			pool.put(dsBuf)
			return nil, fmt.Errorf("downsample backward: %w", err)
		}
		mainIn = dsBuf
	} else {
		defer pool.put(dsBuf)
	}
	g, gBuf, err := through(b.main, b.children.of(b.main), ds, mainIn, b.target, pool, true, b.label, nil)
	defer pool.put(gBuf)
	if err != nil {
		return nil, err
	}
	b.dx.lent = b.target
	dx := b.dx.get(g, g.Shape...)
	b.be.Add(g, gs, dx)
	b.ds.lent, b.dx.lent = nil, nil
	return dx, nil
}

func (b *Residual) label(i int) string {
	if b.Main[i].Name != "" {
		return b.Main[i].Name
	}
	return fmt.Sprintf("step %d (%T)", i, b.main[i])
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
