package nn

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// opaque hides a layer's buffer-sharing methods: a network of opaque
// leaves keeps one output and one gradient tensor per layer, as before
// buffers were shared, and is the reference the shared network must equal.
type opaque struct{ Layer }

// opaqueLeaves wraps every leaf of l in opaque, in place, and returns l.
func opaqueLeaves(l Layer) Layer {
	switch c := l.(type) {
	case *Chain:
		for i, ch := range c.Layers {
			c.Layers[i] = opaqueLeaves(ch)
		}
		return c
	case *Residual:
		for i := range c.Main {
			c.Main[i].Layer = opaqueLeaves(c.Main[i].Layer)
		}
		c.index()
		if c.Downsample != nil {
			opaqueLeaves(c.Downsample)
		}
		return c
	}
	return opaque{l}
}

// tinyResNet has every kind of block and pass-through layer a ResNet has.
func tinyResNet(be tensor.Backend, seed uint64) *Chain {
	rng := rand.New(rand.NewPCG(seed, seed))
	c := NewChain(
		Child{"conv1", NewConv2d(be, 3, 8, 3, Conv2dOptions{Stride: 2, Padding: 1, NoBias: true}, rng)},
		Child{"bn1", NewBatchNorm2d(be, 8)},
		Child{"", NewReLUInPlace(be)},
		Child{"", NewMaxPool2d(be, 3, 2, 1)},
		Child{"layer1", NewSequential(NewBottleneck(be, 8, 4, 1, rng), NewBottleneck(be, 16, 4, 1, rng))},
		Child{"layer2", NewSequential(NewBasicBlock(be, 16, 12, 2, rng), NewBasicBlock(be, 12, 12, 1, rng))},
		Child{"", NewAdaptiveAvgPool2d(be, 1, 1)},
		Child{"", NewFlatten()},
		Child{"fc", NewLinear(be, 12, 5, rng)},
	)
	SkipInputGrad(c)
	return c
}

// step runs one forward and backward pass of net with dy = r and returns
// the output and the parameter gradients.
func step(t *testing.T, be tensor.Backend, net Layer, x *tensor.Tensor, r []float32) ([]float32, [][]float32) {
	t.Helper()
	ZeroGrad(be, Params(net))
	y, err := net.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	out := y.HostData()
	dy := tensor.New(y.Shape...)
	copy(dy.Data, r)
	if _, err := net.Backward(dy); err != nil {
		t.Fatal(err)
	}
	var grads [][]float32
	for _, p := range Params(net) {
		grads = append(grads, p.Grad.HostData())
	}
	return out, grads
}

// sameStep runs one training step of got and of want and fails unless
// their outputs and parameter gradients are the same, bit for bit.
func sameStep(t *testing.T, be tensor.Backend, got, want Layer, x *tensor.Tensor, r []float32, what string) {
	t.Helper()
	gotY, gotG := step(t, be, got, x, r)
	wantY, wantG := step(t, be, want, x, r)
	if !sameBits(gotY, wantY) {
		t.Fatalf("%s: the outputs differ", what)
	}
	for i := range wantG {
		if !sameBits(gotG[i], wantG[i]) {
			t.Fatalf("%s: the gradients of %s differ", what, Params(want)[i].Name)
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// poolStorage returns the buffers a network's pool has made and the
// elements of storage its chunks hold.
func poolStorage(p *bufferPool) (made, elems int) {
	for _, c := range p.chunks {
		elems += c.t.Len()
	}
	return p.made, elems
}

// TestBackwardGradientBuffers: a network whose containers lend their
// children shared gradient buffers (and whose blocks sum in place) computes
// the same outputs and gradients, bit for bit, as the same network with one
// tensor per layer; its pool stays at a few buffers of at most the largest
// activation's size, and does not grow from one step to the next.
func TestBackwardGradientBuffers(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	shared := tinyResNet(be, 3)
	reference := opaqueLeaves(tinyResNet(be, 3))
	rng := rand.New(rand.NewPCG(5, 6))
	x := randTensor(rng, 4, 3, 16, 16)
	r := randTensor(rng, 4, 5).Data
	var made, elems int
	for s := range 3 {
		sameStep(t, be, shared, reference, x, r, fmt.Sprintf("step %d", s))
		m, e := poolStorage(&shared.own)
		if s > 0 && (m != made || e != elems) {
			t.Errorf("step %d: the pool grew from %d buffers (%d elements) to %d (%d)", s, made, elems, m, e)
		}
		made, elems = m, e
	}
	largest := 4 * 16 * 8 * 8 // layer1's output, [4 16 8 8]
	if elems > 4*largest {
		t.Errorf("pool: %d buffers holding %d elements; want at most %d (4 of the largest activation)", made, elems, 4*largest)
	}
	t.Logf("pool: %d buffers, %d elements (largest activation %d)", made, elems, largest)
}

// TestGradientsOff: with gradients off, outputs share buffers and equal
// the gradients-on outputs bit for bit, in evaluation and training mode;
// Backward then fails with an error saying why; turning gradients back on
// restores training.
func TestGradientsOff(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	net := tinyResNet(be, 4)
	rng := rand.New(rand.NewPCG(7, 8))
	x := randTensor(rng, 3, 3, 16, 16)
	for _, training := range []bool{false, true} {
		net.SetTraining(training)
		SetGradEnabled(net, true)
		y, err := net.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		want := y.HostData()
		SetGradEnabled(net, false)
		for range 2 {
			if y, err = net.Forward(x); err != nil {
				t.Fatal(err)
			}
			if !sameBits(y.HostData(), want) {
				t.Fatalf("training %v: the output with gradients off differs", training)
			}
		}
		_, err = net.Backward(tensor.New(y.Shape...))
		if err == nil || !strings.Contains(err.Error(), "gradients off") {
			t.Fatalf("training %v: Backward with gradients off: %v, want an error saying so", training, err)
		}
	}
	made, elems := poolStorage(&net.own)
	if largest := 3 * 16 * 8 * 8; elems > 3*largest {
		t.Errorf("pool with gradients off: %d buffers holding %d elements; want at most %d (3 of the largest activation)", made, elems, 3*largest)
	}
	SetGradEnabled(net, true)
	if _, grads := step(t, be, net, x, randTensor(rng, 3, 5).Data); len(grads) == 0 {
		t.Fatal("no gradients after turning them back on")
	}
}

// TestPassThroughKeepsNoBuffer: a chain whose first layer passes its
// gradient through (Flatten) returns it in a pool buffer, which it gives
// back on the next call instead of taking a new one each time.
func TestPassThroughKeepsNoBuffer(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(9, 9))
	head := NewChain(Child{"", NewFlatten()}, Child{"fc", NewLinear(be, 12, 3, rng)}, Child{"", NewReLU(be)})
	net := NewChain(Child{"conv", NewConv2d(be, 2, 3, 3, Conv2dOptions{Padding: 1}, rng)}, Child{"head", head})
	x := randTensor(rng, 2, 2, 2, 2)
	r := randTensor(rng, 2, 3).Data
	var made int
	for s := range 4 {
		step(t, be, net, x, r)
		step(t, be, head, randTensor(rng, 2, 3, 2, 2), r)
		m, _ := poolStorage(&net.own)
		if s > 0 && m != made {
			t.Fatalf("step %d: the pool made %d buffers, after %d", s, m, made)
		}
		made = m
	}
}

// TestSizeClass: sizes round up to at most four significant bits — by
// less than an eighth — and equal sizes share a class.
func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{1, 1}, {15, 15}, {16, 16}, {17, 17}, {31, 31}, {32, 32}, {33, 34}, {63, 64},
		{1000, 1024}, {4 * 16 * 8 * 8, 4096},
		{32 * 256 * 56 * 56, 26214400}, // ResNet-50's largest activation at batch 32 (+2%)
	} {
		got := sizeClass(c.n)
		if got != c.want {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
		if got < c.n || float64(got) > 1.0625*float64(c.n) {
			t.Errorf("sizeClass(%d) = %d: not within [n, 1.0625n]", c.n, got)
		}
	}
}

// TestShortcutOutputLent: a downsampling shortcut whose last layer (batch
// norm) does not read its output in backward writes that output into a
// pool buffer, given back once added, instead of keeping it for the step.
func TestShortcutOutputLent(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	net := tinyResNet(be, 3)
	rng := rand.New(rand.NewPCG(3, 4))
	step(t, be, net, randTensor(rng, 2, 3, 16, 16), randTensor(rng, 2, 5).Data)
	block := net.Layers[4].(*Chain).Layers[0].(*Residual)
	if block.Downsample == nil {
		t.Fatal("layer1's first block has no downsample")
	}
	last := block.Downsample.Layers[len(block.Downsample.Layers)-1].(*BatchNorm2d)
	if last.out.own != nil {
		t.Errorf("the shortcut's batch norm keeps its own output %s", last.out.own)
	}
	if p := &net.own; len(p.free) != p.made {
		t.Errorf("after a step the pool has %d of its %d buffers free", len(p.free), p.made)
	}
}
