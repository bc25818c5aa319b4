package nn

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// TestCheckpointMatches: with every residual block checkpointed, and the
// stem (conv, batch norm, relu, max pool) as one checkpoint too, three
// training steps give the same outputs, parameter gradients, input
// gradient and batch-norm buffers, bit for bit, as without, and the state
// has the same names; so do evaluation passes with gradients off.
func TestCheckpointMatches(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	plain, ckpt := tinyResNet(be, 5), tinyResNet(be, 5)
	if n := CheckpointBlocks(be, ckpt); n != 4 {
		t.Fatalf("CheckpointBlocks wrapped %d blocks, want 4", n)
	}
	if err := CheckpointSteps(be, ckpt, 0, 4); err != nil {
		t.Fatal(err)
	}
	if _, ok := ckpt.Layers[0].(*Checkpoint); !ok || len(ckpt.Layers) != len(plain.Layers)-3 {
		t.Fatalf("the stem is %T among %d steps, want a checkpoint among %d", ckpt.Layers[0], len(ckpt.Layers), len(plain.Layers)-3)
	}
	rng := rand.New(rand.NewPCG(1, 9))
	for s := range 3 {
		x := randTensor(rng, 4, 3, 16, 16)
		r := randTensor(rng, 4, 5).Data
		sameStep(t, be, ckpt, plain, x, r, fmt.Sprintf("step %d", s))
	}
	want, got := plain.State(), ckpt.State()
	if len(want) != len(got) {
		t.Fatalf("%d state entries, want %d", len(got), len(want))
	}
	for i, v := range want {
		if got[i].Name != v.Name {
			t.Fatalf("state %d is %s, want %s", i, got[i].Name, v.Name)
		}
		switch {
		case v.Count != nil:
			if *got[i].Count != *v.Count {
				t.Errorf("%s = %d, want %d", v.Name, *got[i].Count, *v.Count)
			}
		case !sameBits(got[i].Value.Data, v.Value.Data):
			t.Errorf("%s differs", v.Name)
		}
	}
	sameEvaluation(t, ckpt, plain, randTensor(rng, 2, 3, 16, 16))
}

// TestCheckpointReplaysBatchStats: the recomputation normalises with the
// batch statistics of the first pass instead of computing them again.
// With every batch norm's statistics summed across processes
// (SyncBatchNorm's SumAcross; here one process's, which counts its
// calls), the checkpointed network calls it as often as the plain one,
// once a batch norm in forward and once in backward, and its steps give
// the same bits; the batches differ from step to step, so statistics left
// from another batch would show.
func TestCheckpointReplaysBatchStats(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	plain, ckpt := tinyResNet(be, 5), tinyResNet(be, 5)
	CheckpointBlocks(be, ckpt)
	if err := CheckpointSteps(be, ckpt, 0, 4); err != nil {
		t.Fatal(err)
	}
	norms := 0
	counted := func(net Layer) *int {
		calls := new(int)
		norms = 0
		Walk(net, func(l Layer) {
			if bn, ok := l.(*BatchNorm2d); ok {
				bn.P.SumAcross = func([]float64) { *calls++ }
				norms++
			}
		})
		return calls
	}
	plainCalls, ckptCalls := counted(plain), counted(ckpt)
	rng := rand.New(rand.NewPCG(2, 7))
	for s := range 3 {
		x := randTensor(rng, 4, 3, 16, 16)
		r := randTensor(rng, 4, 5).Data
		sameStep(t, be, ckpt, plain, x, r, fmt.Sprintf("step %d", s))
		if want := 2 * norms * (s + 1); *plainCalls != want || *ckptCalls != want {
			t.Fatalf("after step %d: statistics summed %d times checkpointed, %d plain, want %d (%d batch norms)", s, *ckptCalls, *plainCalls, want, norms)
		}
	}
}

// sameEvaluation switches got and want to evaluation with gradients off
// and fails unless both take x without error and give the same output,
// bit for bit.
func sameEvaluation(t *testing.T, got, want Layer, x *tensor.Tensor) {
	t.Helper()
	var ys [2][]float32
	for i, net := range []Layer{got, want} {
		net.SetTraining(false)
		SetGradEnabled(net, false)
		y, err := net.Forward(x)
		if err != nil {
			t.Fatalf("evaluation with gradients off: %v", err)
		}
		ys[i] = y.HostData()
	}
	if !sameBits(ys[0], ys[1]) {
		t.Fatal("evaluation with gradients off: the outputs differ")
	}
}

// TestCheckpointInputGradAndDropout: a checkpointed chain with dropout
// inside draws the same masks when it recomputes, and its input gradient
// equals the unwrapped chain's.
func TestCheckpointInputGradAndDropout(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	build := func() Layer {
		rng := rand.New(rand.NewPCG(3, 3))
		return NewSequential(NewLinear(be, 6, 8, rng), NewReLUInPlace(be), NewDropout(be, 0.5, 42), NewLinear(be, 8, 4, rng))
	}
	plain, ckpt := build(), NewCheckpoint(be, build())
	rng := rand.New(rand.NewPCG(4, 4))
	for s := range 3 {
		x := randTensor(rng, 5, 6)
		dy := randTensor(rng, 5, 4)
		var outs, dxs [2][]float32
		for k, net := range []Layer{plain, ckpt} {
			y, err := net.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			outs[k] = y.HostData()
			dx, err := net.Backward(dy)
			if err != nil {
				t.Fatal(err)
			}
			dxs[k] = dx.HostData()
		}
		if !sameBits(outs[0], outs[1]) || !sameBits(dxs[0], dxs[1]) {
			t.Fatalf("step %d: the checkpointed chain's output or input gradient differs", s)
		}
	}
}

// blockNet is ten Bottlenecks at one resolution behind a small stem: the
// blocks' activations dominate, as in a ResNet-50.
func blockNet(be tensor.Backend) *Chain {
	rng := rand.New(rand.NewPCG(6, 6))
	blocks := make([]Layer, 10)
	for i := range blocks {
		blocks[i] = NewBottleneck(be, 16, 4, 1, rng)
	}
	c := NewChain(
		Child{"conv1", NewConv2d(be, 3, 16, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng)},
		Child{"bn1", NewBatchNorm2d(be, 16)},
		Child{"", NewReLUInPlace(be)},
		Child{"layer1", NewSequential(blocks...)},
		Child{"", NewAdaptiveAvgPool2d(be, 1, 1)},
		Child{"", NewFlatten()},
		Child{"fc", NewLinear(be, 16, 5, rng)},
	)
	SkipInputGrad(c)
	return c
}

// TestCheckpointSavesMemory: with a ResNet's blocks checkpointed, the
// memory a forward pass leaves for backward (measured on the heap) is much
// smaller than with every activation kept.
func TestCheckpointSavesMemory(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(2, 2))
	x := randTensor(rng, 8, 3, 64, 64)
	r := randTensor(rng, 8, 5).Data
	step(t, be, blockNet(be), x, r) // the backend's scratch grows here
	held := func(checkpoint bool) uint64 {
		net := blockNet(be)
		if checkpoint {
			CheckpointBlocks(be, net)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if _, err := net.Forward(x); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(net)
		return after.HeapAlloc - before.HeapAlloc
	}
	plain, ckpt := held(false), held(true)
	t.Logf("a forward pass keeps %d bytes, %d with checkpointed blocks", plain, ckpt)
	if float64(ckpt) > 0.6*float64(plain) {
		t.Errorf("checkpointed blocks keep %d bytes, more than 0.6× the %d without", ckpt, plain)
	}
}

// TestCheckpointStoresGoBack: a checkpoint's output is kept in a buffer of
// the network's pool and given back after its backward, for the layers
// before it to use; the recomputation writes the block's output over the
// stored one instead of into a buffer of its own; the pool stops growing
// after the first step.
func TestCheckpointStoresGoBack(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	net := tinyResNet(be, 5)
	CheckpointBlocks(be, net)
	rng := rand.New(rand.NewPCG(4, 4))
	x := randTensor(rng, 4, 3, 16, 16)
	r := randTensor(rng, 4, 5).Data
	var made, elems int
	for s := range 3 {
		if _, err := net.Forward(x); err != nil {
			t.Fatal(err)
		}
		var ckpts []*Checkpoint
		Walk(net, func(l Layer) {
			if c, ok := l.(*Checkpoint); ok {
				ckpts = append(ckpts, c)
			}
		})
		for i, c := range ckpts {
			if c.store == nil || c.store.pool != &net.own || !c.store.holds(c.y) {
				t.Fatalf("step %d: checkpoint %d's output is not held in a pool buffer", s, i)
			}
		}
		if _, err := net.Forward(x); err != nil { // a forward pass without backward gives its stores back
			t.Fatal(err)
		}
		step(t, be, net, x, r)
		for i, c := range ckpts {
			if c.store != nil {
				t.Errorf("step %d: checkpoint %d still holds its output after backward", s, i)
			}
			if y := c.Inner.(*Residual).y; !tensor.Overlaps(y, c.y) {
				t.Errorf("step %d: checkpoint %d recomputed its output into a buffer of its own", s, i)
			}
		}
		p := &net.own
		if len(p.free) != p.made {
			t.Errorf("step %d: %d of the pool's %d buffers free after the step", s, len(p.free), p.made)
		}
		m, e := poolStorage(p)
		if s > 0 && (m != made || e != elems) {
			t.Errorf("step %d: the pool grew from %d buffers (%d elements) to %d (%d)", s, made, elems, m, e)
		}
		made, elems = m, e
	}
}

// TestCheckpointStepsRange: a range of steps that is empty or out of the
// chain is an error naming it, and leaves the chain as it was.
func TestCheckpointStepsRange(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, r := range [][2]int{{-1, 2}, {0, 10}, {3, 3}, {4, 2}} {
		net := tinyResNet(be, 1)
		n := len(net.Layers)
		err := CheckpointSteps(be, net, r[0], r[1])
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("[%d, %d) of a chain of %d", r[0], r[1], n)) {
			t.Errorf("steps [%d, %d): %v", r[0], r[1], err)
		}
		if len(net.Layers) != n {
			t.Errorf("steps [%d, %d): the chain changed", r[0], r[1])
		}
	}
}

// poolSpy passes its input through and, in Backward, reports whether a
// given buffer is free in the pool it was lent by its container.
type poolSpy struct {
	pool  *bufferPool
	watch **buffer
	free  bool // whether *watch was free at the last Backward
}

func (s *poolSpy) Forward(x *tensor.Tensor) (*tensor.Tensor, error) { return x, nil }
func (s *poolSpy) Backward(dy *tensor.Tensor) (*tensor.Tensor, error) {
	s.free = false
	for _, f := range s.pool.free {
		s.free = s.free || f == *s.watch
	}
	return dy, nil
}
func (s *poolSpy) borrow(_ *buffer, p *bufferPool, _ *buffer) { s.pool = p }
func (s *poolSpy) State() []Var                               { return nil }
func (s *poolSpy) SetTraining(bool)                           {}
func (s *poolSpy) Replica() Layer                             { return s }

// TestCheckpointOutputFreedInBackward: a checkpointed residual block's
// stored output goes back to the pool as soon as the block's backward has
// read it (its relu's mask), before the main path's backward, where the
// gradients of the layers below can use its storage. (When the block's
// output gradient is not a pool buffer, the sum's gradient goes over the
// stored output instead: TestCheckpointMatches checks those results.)
func TestCheckpointOutputFreedInBackward(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	var stored *buffer
	spy := &poolSpy{watch: &stored}
	block := newResidual(be, 4, 4, 1, rng, []Child{
		{"", spy},
		{"conv1", NewConv2d(be, 4, 4, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng)},
		{"bn1", NewBatchNorm2d(be, 4)},
	})
	ckpt := NewCheckpoint(be, block)
	net := NewChain(
		Child{"conv", NewConv2d(be, 3, 4, 3, Conv2dOptions{Padding: 1}, rng)},
		Child{"block", ckpt},
		// The block's output gradient then comes in a pool buffer, which
		// the sum's gradient overwrites.
		Child{"head", NewConv2d(be, 4, 4, 1, Conv2dOptions{}, rng)},
	)
	x := randTensor(rng, 2, 3, 6, 6)
	r := randTensor(rng, 2, 4, 6, 6).Data
	for s := range 2 {
		if _, err := net.Forward(x); err != nil {
			t.Fatal(err)
		}
		stored = ckpt.store
		if stored == nil {
			t.Fatalf("step %d: the checkpoint stored no output buffer", s)
		}
		dy := tensor.New(2, 4, 6, 6)
		copy(dy.Data, r)
		if _, err := net.Backward(dy); err != nil {
			t.Fatal(err)
		}
		if !spy.free {
			t.Errorf("step %d: the block's stored output was not back in the pool during its main path's backward", s)
		}
		if p := &net.own; len(p.free) != p.made {
			t.Errorf("step %d: %d of the pool's %d buffers free after the step", s, len(p.free), p.made)
		}
	}
}
