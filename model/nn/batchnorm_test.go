package nn

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// unfusing hides a backend's fused batch norm + relu and residual sum +
// relu, so the layers make the two calls.
type unfusing struct{ tensor.Backend }

// TestFusedBatchNormReLU: on a backend that fuses them, every batch norm
// followed by an in-place relu in the same container runs fused (and
// only those: not one followed by something else, nor across a
// container's edge), and a network so fused (its residual blocks' sums
// and relus too) trains and evaluates to the same bits as on the backend
// without fusion; its replica (DDP) pairs
// anew; editing a container's layers undoes a pairing that no longer
// holds.
func TestFusedBatchNormReLU(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	fused := tinyResNet(be, 6)
	plain := tinyResNet(unfusing{be}, 6)
	rng := rand.New(rand.NewPCG(6, 7))
	x := randTensor(rng, 3, 3, 16, 16)
	r := randTensor(rng, 3, 5).Data
	sameStep(t, be, fused, plain, x, r, "training step")
	bn1 := fused.Layers[1].(*BatchNorm2d)
	block := fused.Layers[4].(*Chain).Layers[0].(*Residual) // a Bottleneck: bn1, bn2 fused, bn3 not
	for _, c := range []struct {
		name string
		bn   *BatchNorm2d
		want bool
	}{
		{"bn1", bn1, true},
		{"layer1.0.bn1", block.Main[1].Layer.(*BatchNorm2d), true},
		{"layer1.0.bn2", block.Main[4].Layer.(*BatchNorm2d), true},
		{"layer1.0.bn3 (before the sum)", block.Main[7].Layer.(*BatchNorm2d), false},
		{"layer1.0.downsample.1", block.Downsample.Layers[1].(*BatchNorm2d), false},
		{"on the backend without fusion", plain.Layers[1].(*BatchNorm2d), false},
	} {
		if got := c.bn.fusedReLU(); got != c.want {
			t.Errorf("%s: fused %v, want %v", c.name, got, c.want)
		}
	}
	replica := fused.Replica().(*Chain)
	sameStep(t, be, replica, plain, x, r, "replica's training step")
	if !replica.Layers[1].(*BatchNorm2d).fusedReLU() || !bn1.fusedReLU() {
		t.Error("the replica's bn1 or the original's is no longer fused")
	}
	fused.SetTraining(false)
	plain.SetTraining(false)
	sameStep(t, be, fused, plain, x, r, "evaluation-mode step")

	// Cut the relu out of the stem: bn1 must stop applying it.
	relu := fused.Layers[2]
	for _, c := range []*Chain{fused, plain} {
		c.Names = append(c.Names[:2:2], c.Names[3:]...)
		c.Layers = append(c.Layers[:2:2], c.Layers[3:]...)
	}
	sameStep(t, be, fused, plain, x, r, "without the stem's relu")
	if bn1.fusedReLU() || relu.(*ReLU).fused() {
		t.Error("bn1 and the relu cut out of its chain are still paired")
	}
}

// TestConvBatchNormFolded: with gradients off and the batch norms
// evaluating, every convolution followed by a batch norm in its container
// applies it (and the relu fused into that) as it convolves, the batch
// norm passing its input through; the outputs are the separate layers'
// to the bit on 1 and 3 threads, through each of the convolution's paths
// (im2col image by image and in groups of small maps, Winograd, a 1×1
// straight from its input) and in a residual network. With gradients on,
// or in training, the layers run apart.
func TestConvBatchNormFolded(t *testing.T) {
	build := func(be tensor.Backend) *Chain {
		rng := rand.New(rand.NewPCG(8, 9))
		return NewChain(
			Child{"im2col", NewConv2d(be, 3, 16, 3, Conv2dOptions{Padding: 1}, rng)},
			Child{"bn1", NewBatchNorm2d(be, 16)},
			Child{"", NewReLUInPlace(be)},
			Child{"winograd", NewConv2d(be, 16, 16, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng)},
			Child{"bn2", NewBatchNorm2d(be, 16)},
			Child{"pointwise", NewConv2d(be, 16, 32, 1, Conv2dOptions{NoBias: true}, rng)},
			Child{"bn3", NewBatchNorm2d(be, 32)},
			Child{"", NewReLUInPlace(be)},
			Child{"grouped", NewConv2d(be, 32, 32, 3, Conv2dOptions{Stride: 2, Padding: 1}, rng)},
			Child{"bn4", NewBatchNorm2d(be, 32)},
			Child{"", NewReLUInPlace(be)},
			Child{"last", NewConv2d(be, 32, 8, 1, Conv2dOptions{}, rng)},
		)
	}
	for _, threads := range []int{1, 3} {
		be := cpu.New(threads)
		rng := rand.New(rand.NewPCG(10, 11))
		for _, net := range []struct {
			name         string
			fused, plain *Chain
			x            *tensor.Tensor
		}{
			{"chain", build(be), build(unfusing{be}), randTensor(rng, 4, 3, 24, 24)},
			{"residual network", tinyResNet(be, 7), tinyResNet(unfusing{be}, 7), randTensor(rng, 3, 3, 16, 16)},
		} {
			fused, plain, x := net.fused, net.plain, net.x
			r := randTensor(rng, 64*x.Shape[0]*24*24).Data
			// Training steps first, so that the running statistics the
			// evaluation uses are not the initial 0 and 1.
			var y *tensor.Tensor
			for _, c := range []*Chain{fused, plain} {
				var err error
				if y, err = c.Forward(x); err != nil {
					t.Fatal(err)
				}
			}
			sameStep(t, be, fused, plain, x, r[:tensor.Volume(y.Shape)], net.name+": training step")
			for _, c := range []*Chain{fused, plain} {
				c.SetTraining(false)
				SetGradEnabled(c, false)
			}
			got, err := fused.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			gotY := got.HostData()
			want, err := plain.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			if !sameBits(gotY, want.HostData()) {
				t.Fatalf("%s, %d threads: evaluation outputs differ", net.name, threads)
			}
			// Folding keeps no buffer of its own: a container's output
			// still goes where its caller lent (foldsToEnd).
			for range 2 {
				if _, err := fused.Forward(x); err != nil {
					t.Fatal(err)
				}
			}
			if mf, mp := fused.own.made, plain.own.made; mf > mp {
				t.Errorf("%s, %d threads: the pool made %d buffers folding, %d without", net.name, threads, mf, mp)
			}
			if net.name == "chain" {
				for i, l := range fused.Layers {
					if conv, ok := l.(*Conv2d); ok && conv.foldsBN() != (fused.Names[i] != "last") {
						t.Errorf("%s: folds its batch norm %v", fused.Names[i], conv.foldsBN())
					}
				}
				if plain.Layers[0].(*Conv2d).foldsBN() {
					t.Error("folded on the backend without the fused call")
				}
			}
			for _, c := range []*Chain{fused, plain} {
				SetGradEnabled(c, true)
			}
			sameStep(t, be, fused, plain, x, r[:tensor.Volume(want.Shape)], net.name+": evaluation-mode step with gradients")
		}
		be.Close()
	}
}

// TestConvBatchNormMismatchNotFolded: a batch norm over another channel
// count than the convolution before it gives its shape error in
// evaluation with gradients off too, not a panic in the fused call.
func TestConvBatchNormMismatchNotFolded(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(12, 13))
	net := NewChain(Child{"conv", NewConv2d(be, 3, 4, 3, Conv2dOptions{Padding: 1}, rng)}, Child{"bn", NewBatchNorm2d(be, 3)})
	net.SetTraining(false)
	SetGradEnabled(net, false)
	_, err := net.Forward(randTensor(rng, 2, 3, 6, 6))
	if err == nil || !strings.Contains(err.Error(), "bn") || !strings.Contains(err.Error(), "3") {
		t.Fatalf("got %v, want the batch norm's shape error", err)
	}
}

// TestConvBatchNormFoldedOnlyInItsContainer: a convolution shared by two
// containers — one pairing it with the batch norm after it, one where it
// comes last (a pipeline stage cut between the two) — folds the batch
// norm only when the container pairing them runs them one after the
// other, whichever ran last.
func TestConvBatchNormFoldedOnlyInItsContainer(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(14, 15))
	conv := NewConv2d(be, 3, 4, 3, Conv2dOptions{Padding: 1}, rng)
	bn := NewBatchNorm2d(be, 4)
	for i := range bn.C {
		bn.RunningMean.Data[i], bn.RunningVar.Data[i], bn.Bias.Data[i] = 0.3*float32(i), 2+float32(i), 0.5
	}
	whole := NewChain(Child{"conv", conv}, Child{"bn", bn})
	stage := NewChain(Child{"conv", conv})
	plain := NewChain(Child{"conv", NewConv2d(unfusing{be}, 3, 4, 3, Conv2dOptions{Padding: 1}, rand.New(rand.NewPCG(14, 15)))})
	for _, c := range []*Chain{whole, stage, plain} {
		c.SetTraining(false)
		SetGradEnabled(c, false)
	}
	x := randTensor(rng, 2, 3, 5, 5)
	raw, err := plain.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	want := raw.HostData()
	for _, order := range [][]*Chain{{stage, whole, stage}, {whole, stage, whole, stage}} {
		for _, c := range order {
			y, err := c.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			if c == stage && !sameBits(y.HostData(), want) {
				t.Fatal("the stage ending with the convolution returned its output with the batch norm applied")
			}
		}
	}
}
