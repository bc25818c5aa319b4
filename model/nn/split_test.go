package nn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// TestSplitBackward runs three microbatches through a network and a
// replica of it, as a pipeline stage does, with the backward split:
// microbatch 0 on the network and 1 on the replica go forward, then back
// (B, input gradients only), 0's weight pass runs (WeightGrads), 2 goes
// forward and back on the network, then 1's and 2's weight passes. With
// the replica borrowing from the network's buffer pool (ShareBuffers) and
// without, the input gradients and the accumulated parameter gradients
// must equal, bit for bit, those of the unsplit network running the three
// microbatches one after the other: so no buffer a pending weight pass
// reads was lent again in between — 2's backward borrows buffers while
// 1's pass still waits — and no layer lost or doubled a weight gradient.
func TestSplitBackward(t *testing.T) {
	nets := []struct {
		name  string
		build func(be tensor.Backend) Layer
		// deferred is how many layers leave their weights for later.
		deferred int
	}{
		{"resnet", func(be tensor.Backend) Layer { return tinyResNet(be, 3) }, 14},
		{"resnet with input gradient", func(be tensor.Backend) Layer {
			c := tinyResNet(be, 3)
			c.Layers[0].(*Conv2d).NoInputGrad = false
			return c
		}, 14},
		{"resnet with checkpointed blocks", func(be tensor.Backend) Layer {
			c := tinyResNet(be, 3)
			CheckpointBlocks(be, c)
			return c
		}, 2}, // the stem's convolution and fc; the blocks' layers keep both passes
		{"blocks", func(be tensor.Backend) Layer { return blockNet(be) }, 32},
	}
	for _, threads := range []int{1, 2} {
		be := cpu.New(threads)
		for _, n := range nets {
			for _, share := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/threads=%d/shared=%v", n.name, threads, share), func(t *testing.T) {
					checkSplitBackward(t, be, n.build, n.deferred, share)
				})
			}
		}
		be.Close()
	}
}

func checkSplitBackward(t *testing.T, be tensor.Backend, build func(tensor.Backend) Layer, deferred int, share bool) {
	rng := rand.New(rand.NewPCG(7, 8))
	xs := []*tensor.Tensor{randTensor(rng, 3, 3, 12, 12), randTensor(rng, 2, 3, 12, 12), randTensor(rng, 3, 3, 12, 12)}
	ref := build(be)
	ZeroGrad(be, Params(ref))
	var wantDX, rs [][]float32
	for _, x := range xs {
		y, err := ref.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		r := randTensor(rng, y.Shape...)
		rs = append(rs, r.Data)
		dx, err := ref.Backward(r)
		if err != nil {
			t.Fatal(err)
		}
		if dx != nil {
			wantDX = append(wantDX, append([]float32(nil), dx.Data...))
		}
	}

	net := build(be)
	ZeroGrad(be, Params(net))
	DeferWeightGrads(net, true)
	rep := net.Replica()
	if share {
		ShareBuffers(net, rep)
	}
	if got := countDeferring(rep); got != deferred {
		t.Fatalf("%d layers of the replica defer their weights, want %d", got, deferred)
	}
	var gotDX [][]float32
	fwd := func(l Layer, k int) {
		if _, err := l.Forward(xs[k]); err != nil {
			t.Fatal(err)
		}
	}
	bwd := func(l Layer, k int) {
		dy := tensor.New(l.(*Chain).outShape()...)
		copy(dy.Data, rs[k])
		dx, err := l.Backward(dy)
		if err != nil {
			t.Fatal(err)
		}
		if dx != nil {
			gotDX = append(gotDX, append([]float32(nil), dx.Data...))
		}
	}
	fwd(net, 0)
	fwd(rep, 1)
	bwd(net, 0)
	bwd(rep, 1)
	// Before any weight pass, the deferring layers' gradients are zero.
	for _, p := range deferredParams(net) {
		for _, v := range p.Grad.Data {
			if v != 0 {
				t.Fatalf("%s's gradient was accumulated before WeightGrads", p.Name)
			}
		}
	}
	WeightGrads(net)
	fwd(net, 2)
	bwd(net, 2)
	WeightGrads(rep)
	WeightGrads(net)
	WeightGrads(net) // nothing pending: no change
	if len(gotDX) != len(wantDX) {
		t.Fatalf("%d input gradients, want %d", len(gotDX), len(wantDX))
	}
	for i := range wantDX {
		if !sameBits(gotDX[i], wantDX[i]) {
			t.Fatalf("microbatch %d: the input gradients differ", i)
		}
	}
	want, got := Params(ref), Params(net)
	for i := range want {
		if !sameBits(got[i].Grad.Data, want[i].Grad.Data) {
			t.Fatalf("the gradients of %s differ", want[i].Name)
		}
	}
	for _, l := range []Layer{net, rep} {
		p := l.(*Chain).pool()
		if len(p.reads) != 0 || len(p.later) != 0 {
			t.Fatalf("after the weight passes the pool still keeps %d buffers for %d reads", len(p.later), len(p.reads))
		}
	}
	if share && rep.(*Chain).pool() != net.(*Chain).pool() {
		t.Fatal("the replica does not borrow from the network's pool")
	}

	// Switched off again, Backward computes both.
	DeferWeightGrads(net, false)
	ZeroGrad(be, Params(ref))
	sameStep(t, be, net, ref, xs[0], rs[0], "after DeferWeightGrads(false)")
}

// outShape is the shape of a chain's last output.
func (c *Chain) outShape() []int {
	var shape []int
	Walk(c, func(l Layer) {
		switch x := l.(type) {
		case *Linear:
			shape = x.y.Shape
		}
	})
	return shape
}

func countDeferring(l Layer) int {
	n := 0
	Walk(l, func(x Layer) {
		switch d := x.(type) {
		case *Conv2d:
			if d.deferral.on {
				n++
			}
		case *Linear:
			if d.deferral.on {
				n++
			}
		}
	})
	return n
}

// deferredParams returns the parameters of l's deferring layers.
func deferredParams(l Layer) []Var {
	var ps []Var
	Walk(l, func(x Layer) {
		switch d := x.(type) {
		case *Conv2d:
			if d.deferral.on {
				ps = append(ps, Params(d)...)
			}
		case *Linear:
			if d.deferral.on {
				ps = append(ps, Params(d)...)
			}
		}
	})
	return ps
}

// TestPendingWeightsRefuseAnotherPass: while a deferred weight pass is
// pending, another forward or backward pass through its layers would
// overwrite what it reads: both fail with an error saying so, and work
// again once WeightGrads has run.
func TestPendingWeightsRefuseAnotherPass(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	net := tinyResNet(be, 3)
	DeferWeightGrads(net, true)
	x := randTensor(rand.New(rand.NewPCG(1, 1)), 2, 3, 12, 12)
	y, err := net.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	dy := tensor.New(y.Shape...)
	if _, err := net.Backward(dy); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Forward(x); !errors.Is(err, errWeightsPending) {
		t.Fatalf("Forward with weight passes pending: %v, want %v", err, errWeightsPending)
	}
	if _, err := net.Backward(dy); !errors.Is(err, errWeightsPending) {
		t.Fatalf("Backward with weight passes pending: %v, want %v", err, errWeightsPending)
	}
	WeightGrads(net)
	if _, err := net.Forward(x); err != nil {
		t.Fatalf("Forward after WeightGrads: %v", err)
	}
}
