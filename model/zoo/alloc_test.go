package zoo

import (
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/tensor"
)

// TestTrainingStepAllocatesNothing runs training steps of the MNIST net and
// ResNet-18 (two threads) and asserts that, once warm, a step — forward,
// loss, backward, optimizer — allocates no memory.
func TestTrainingStepAllocatesNothing(t *testing.T) {
	for _, name := range []string{"mnist", "resnet18"} {
		t.Run(name, func(t *testing.T) {
			be := cpu.New(2)
			defer be.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			m, _ := New(name, be, rng)
			x := tensor.New(append([]int{4}, m.Input...)...)
			for i := range x.Data {
				x.Data[i] = rng.Float32()
			}
			target := []int32{1, 2, 3, 4}
			opt, _ := optim.NewSGD(be, nn.Params(m.Net), tensor.SGDOptions{LR: 0.01, Momentum: 0.9})
			loss := m.NewLoss(be)
			step := func() {
				nn.ZeroGrad(be, m.Net)
				y, err := m.Net.Forward(x)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := loss.Forward(y, target); err != nil {
					t.Fatal(err)
				}
				dy, _ := loss.Backward()
				if _, err := m.Net.Backward(dy); err != nil {
					t.Fatal(err)
				}
				opt.Step()
			}
			step()
			if a := testing.AllocsPerRun(3, step); a != 0 {
				t.Fatalf("a training step allocates %v times", a)
			}
		})
	}
}
