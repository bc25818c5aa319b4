package nn

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// convCounter counts the forward convolutions run through it.
type convCounter struct {
	tensor.Backend
	calls int
}

func (c *convCounter) Conv2d(x, w, b, y *tensor.Tensor, p tensor.ConvParams) {
	c.calls++
	c.Backend.Conv2d(x, w, b, y, p)
}

// savedNet is a stem and four Bottlenecks, the first two downsampling,
// with every block checkpointed when checkpoint is set and, when save is
// set too, each block's 3×3 convolution saved; it returns the net and its
// checkpoints.
func savedNet(be tensor.Backend, checkpoint, save bool) (*Chain, []*Checkpoint) {
	rng := rand.New(rand.NewPCG(8, 8))
	blocks := []Layer{
		NewBottleneck(be, 8, 4, 2, rng), NewBottleneck(be, 16, 4, 1, rng),
		NewBottleneck(be, 16, 8, 2, rng), NewBottleneck(be, 32, 8, 1, rng),
	}
	var cps []*Checkpoint
	if checkpoint {
		for i, b := range blocks {
			cp := NewCheckpoint(be, b)
			if save {
				if err := cp.Save(b.(*Residual).Main[3].Layer.(*Conv2d)); err != nil {
					panic(err)
				}
			}
			blocks[i], cps = cp, append(cps, cp)
		}
	}
	return NewChain(
		Child{"conv1", NewConv2d(be, 3, 8, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng)},
		Child{"bn1", NewBatchNorm2d(be, 8)},
		Child{"", NewReLUInPlace(be)},
		Child{"layer1", NewSequential(blocks...)},
		Child{"", NewAdaptiveAvgPool2d(be, 1, 1)},
		Child{"", NewFlatten()},
		Child{"fc", NewLinear(be, 32, 5, rng)},
	), cps
}

// TestCheckpointSave: checkpointed Bottlenecks whose 3×3 convolutions keep
// their outputs (Checkpoint.Save) give the same outputs, gradients and
// buffers, bit for bit, as the network without checkpoints, step after
// step, and so does a replica of them; each step's recomputation runs
// every convolution of the blocks again except the saved ones; the saved
// outputs' storage goes back to the pool by the end of the step;
// evaluation with gradients off is unchanged; and a warm step allocates
// nothing.
func TestCheckpointSave(t *testing.T) {
	for _, threads := range []int{1, 2} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			base := cpu.New(threads)
			defer base.Close()
			be := &convCounter{Backend: base}
			plain, _ := savedNet(be, false, false)
			full, _ := savedNet(be, true, false)
			saved, cps := savedNet(be, true, true)
			replica := saved.Replica()
			rng := rand.New(rand.NewPCG(1, 2))
			var calls [3]int
			for s := range 3 {
				x := randTensor(rng, 4, 3, 16, 16)
				r := randTensor(rng, 4, 5).Data
				for i, net := range []Layer{plain, full, saved} {
					be.calls = 0
					step(t, be, net, x, r)
					calls[i] = be.calls
				}
				sameStep(t, be, saved, plain, x, r, fmt.Sprintf("step %d", s))
				sameStep(t, be, replica, plain, x, r, fmt.Sprintf("step %d, replica", s))
				// 15 convolutions: the stem's, three a block, two
				// downsamples; the blocks' 14 recomputed without saves,
				// 10 with.
				if want := [3]int{15, 29, 25}; calls != want {
					t.Fatalf("step %d: forward convolutions plain, recomputed, with saves: %v, want %v", s, calls, want)
				}
				for i, cp := range cps {
					for _, o := range cp.saves {
						if o.out.lent != nil {
							t.Fatalf("step %d: block %d's saved output still holds pool storage after backward", s, i)
						}
					}
				}
				if p := &saved.own; len(p.free) != p.made {
					t.Fatalf("step %d: %d of the pool's %d buffers free after the step", s, len(p.free), p.made)
				}
			}
			sameEvaluation(t, saved, plain, randTensor(rng, 2, 3, 16, 16))
			// Once warm, a step allocates nothing.
			saved.SetTraining(true)
			SetGradEnabled(saved, true)
			x, dy := randTensor(rng, 4, 3, 16, 16), randTensor(rng, 4, 5)
			run := func() {
				if _, err := saved.Forward(x); err != nil {
					t.Fatal(err)
				}
				if _, err := saved.Backward(dy); err != nil {
					t.Fatal(err)
				}
			}
			run()
			if a := testing.AllocsPerRun(5, run); a != 0 {
				t.Errorf("a step with saved outputs allocates %v times", a)
			}
		})
	}
}

// TestCheckpointSaveErrors: saving a convolution that is not inside the
// checkpointed layer, or that another checkpoint saves, is an error
// saying so; saving one twice is not.
func TestCheckpointSaveErrors(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	block := NewBottleneck(be, 8, 4, 1, rng)
	conv := block.Main[3].Layer.(*Conv2d)
	outer, inner := NewCheckpoint(be, NewSequential(NewCheckpoint(be, block))), NewCheckpoint(be, block)
	for _, c := range []struct {
		name string
		save func() error
		want string
	}{
		{"outside", func() error { return inner.Save(NewConv2d(be, 4, 4, 3, Conv2dOptions{}, rng)) }, "not inside"},
		{"first", func() error { return inner.Save(conv) }, ""},
		{"twice", func() error { return inner.Save(conv, conv) }, ""},
		{"another checkpoint's", func() error { return outer.Save(conv) }, "another checkpoint"},
	} {
		err := c.save()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if len(inner.saves) != 1 || len(outer.saves) != 0 {
		t.Errorf("saved outputs: %d in the inner checkpoint, %d in the outer; want 1, 0", len(inner.saves), len(outer.saves))
	}
}
