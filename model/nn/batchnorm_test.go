package nn

import (
	"math/rand/v2"
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
