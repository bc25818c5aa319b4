package zoo

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// BenchmarkTrainStep times one training step (zero grad, forward, loss,
// backward, optimizer) of the workshop models at their seeds' batch sizes,
// on one and two threads, and reports images per second.
// bench/competitors/torch_train.py measures PyTorch on the same steps.
//
//	go test ./model/zoo -run '^$' -bench 'TrainStep|Inference' -count 3
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct {
		model     string
		batch     int
		recompute bool
	}{{"mnist", 64, false}, {"cifarnet", 128, false}, {"resnet50", 32, false}, {"resnet50", 32, true}} {
		name := c.model
		if c.recompute {
			name += "-recompute" // checkpointed residual blocks
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/batch=%d/threads=%d", name, c.batch, threads), func(b *testing.B) {
				be := cpu.New(threads)
				defer be.Close()
				rng := rand.New(rand.NewPCG(1, 2))
				spec, err := Lookup(c.model)
				if err != nil {
					b.Fatal(err)
				}
				spec.Recompute = c.recompute
				m := spec.Build(be, rng.Uint64())
				step := newTrainStep(b, be, m, c.batch, rng)
				step()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					step()
				}
				b.ReportMetric(float64(c.batch*b.N)/b.Elapsed().Seconds(), "img/s")
			})
		}
	}
}

// BenchmarkInference times evaluation-mode forward passes of CIFARNet at
// batch 128 and ResNet-50 at batch 32 (224×224) and reports images per
// second.
func BenchmarkInference(b *testing.B) {
	for _, c := range []struct {
		model string
		batch int
	}{{"cifarnet", 128}, {"resnet50", 32}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/batch=%d/threads=%d", c.model, c.batch, threads), func(b *testing.B) {
				inference(b, c.model, c.batch, threads)
			})
		}
	}
}

// inference times evaluation-mode forward passes of model at batch.
func inference(b *testing.B, model string, batch, threads int) {
	be := cpu.New(threads)
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	m, _ := New(model, be, rng)
	m.Net.SetTraining(false)
	nn.SetGradEnabled(m.Net, false)
	x := tensor.New(append([]int{batch}, m.Input...)...)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	if _, err := m.Net.Forward(x); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Net.Forward(x); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "img/s")
}
