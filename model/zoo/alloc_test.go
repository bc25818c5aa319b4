package zoo

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/optim"
	"github.com/gorun/gorun/model/tensor"
)

// TestTrainingStepAllocatesNothing runs training steps of the MNIST net and
// ResNet-18 (two threads; and with --recompute's checkpoints) and asserts
// that, once warm, a step — forward, loss, backward, optimizer —
// allocates no memory, over 20 steps.
func TestTrainingStepAllocatesNothing(t *testing.T) {
	for _, name := range []string{"mnist", "resnet18", "resnet18-recompute"} {
		t.Run(name, func(t *testing.T) {
			be := cpu.New(2)
			defer be.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			model, recompute := strings.CutSuffix(name, "-recompute")
			spec, err := Lookup(model)
			if err != nil {
				t.Fatal(err)
			}
			spec.Recompute = recompute
			m := spec.Build(be, rng.Uint64())
			step := newTrainStep(t, be, m, 4, rng)
			step()
			// Many steps: an allocation now and then (a type assertion
			// filling the runtime's caches, a pool that keeps growing)
			// is an allocation too. The race pass (-short) takes three.
			runs := 20
			if testing.Short() {
				runs = 3
			}
			if a := testing.AllocsPerRun(runs, step); a != 0 {
				t.Fatalf("a training step allocates %v times on average", a)
			}
		})
	}
}

// newTrainStep returns one SGD training step (zero grad, forward, loss,
// backward, update) of m on a fixed random batch.
func newTrainStep(tb testing.TB, be tensor.Backend, m *Model, batch int, rng *rand.Rand) func() {
	x := tensor.New(append([]int{batch}, m.Input...)...)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	target := make([]int32, batch)
	for i := range target {
		target[i] = int32((i + 1) % m.Classes)
	}
	opt, err := optim.NewSGD(be, nn.Params(m.Net), tensor.SGDOptions{LR: 0.01, Momentum: 0.9})
	if err != nil {
		tb.Fatal(err)
	}
	loss := m.NewLoss(be)
	return func() {
		opt.ZeroGrad()
		y, err := m.Net.Forward(x)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := loss.Forward(y, target); err != nil {
			tb.Fatal(err)
		}
		dy, _ := loss.Backward()
		if _, err := m.Net.Backward(dy); err != nil {
			tb.Fatal(err)
		}
		opt.Step()
	}
}
