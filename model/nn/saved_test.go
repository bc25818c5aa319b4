package nn

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// convCounter counts the forward convolutions and batch-norm
// normalisations run through it.
type convCounter struct {
	tensor.Backend
	calls, norms int
}

func (c *convCounter) Conv2d(x, w, b, y *tensor.Tensor, p tensor.ConvParams) {
	c.calls++
	c.Backend.Conv2d(x, w, b, y, p)
}

func (c *convCounter) BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd *tensor.Tensor, p tensor.BatchNormParams) {
	c.norms++
	c.Backend.BatchNorm(x, y, gamma, beta, runMean, runVar, saveMean, saveInvStd, p)
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
// every convolution of the blocks again except the saved ones, and every
// batch norm but those ending the blocks' paths; the saved
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
			var calls, norms [3]int
			for s := range 3 {
				x := randTensor(rng, 4, 3, 16, 16)
				r := randTensor(rng, 4, 5).Data
				for i, net := range []Layer{plain, full, saved} {
					be.calls, be.norms = 0, 0
					step(t, be, net, x, r)
					calls[i], norms[i] = be.calls, be.norms
				}
				sameStep(t, be, saved, plain, x, r, fmt.Sprintf("step %d", s))
				sameStep(t, be, replica, plain, x, r, fmt.Sprintf("step %d, replica", s))
				// 15 convolutions: the stem's, three a block, two
				// downsamples; the blocks' 14 recomputed without saves,
				// 10 with.
				if want := [3]int{15, 29, 25}; calls != want {
					t.Fatalf("step %d: forward convolutions plain, recomputed, with saves: %v, want %v", s, calls, want)
				}
				// 15 batch norms; the recomputation normalises again
				// only what the blocks' backward passes read, not the
				// two paths' last batch norms (bn3, downsample.1),
				// whose outputs made the blocks' outputs, stored.
				if want := [3]int{15, 23, 23}; norms != want {
					t.Fatalf("step %d: batch-norm normalisations plain, recomputed, with saves: %v, want %v", s, norms, want)
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

// TestResidualKeptInputs: a recomputed block whose paths' last batch
// norms kept only their inputs takes the stored output as its own; none
// keeping makes it compute the sum as usual; some keeping and some not
// (no sum can be made) is an error that says so.
func TestResidualKeptInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	be := cpu.New(1)
	defer be.Close()
	b := NewBottleneck(be, 8, 4, 2, rng)
	ends := b.endNorms()
	if len(ends) != 2 || ends[0] != b.LastBN() || ends[1] != b.Downsample.Layers[1] {
		t.Fatalf("endNorms: %v, want the main path's bn3 and downsample.1", ends)
	}
	known := tensor.New(2, 16, 4, 4)
	h := tensor.New(2, 16, 4, 4)
	for _, tc := range []struct {
		name       string
		known      *tensor.Tensor
		kept       [2]bool
		h          *tensor.Tensor
		wantKept   bool
		wantErrSub string
	}{
		{"no known output", nil, [2]bool{true, true}, h, false, ""},
		{"none kept", known, [2]bool{}, h, false, ""},
		{"both kept", known, [2]bool{true, true}, h, true, ""},
		{"one kept", known, [2]bool{true, false}, h, false, "1 of 2 batch norms"},
		{"other shape", known, [2]bool{true, true}, tensor.New(2, 16, 2, 2), false, "output [2 16 2 2], first pass [2 16 4 4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.knownOut, b.y = tc.known, nil
			ends[0].keptInput, ends[1].keptInput = tc.kept[0], tc.kept[1]
			kept, err := b.keptInputs(ends, tc.h)
			switch {
			case tc.wantErrSub != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErrSub)
				}
			case err != nil:
				t.Fatal(err)
			case kept != tc.wantKept:
				t.Fatalf("kept %v, want %v", kept, tc.wantKept)
			case kept && b.y != tc.known:
				t.Fatal("the block's output is not the known one")
			}
		})
	}
}
