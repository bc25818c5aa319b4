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
// backward, optimizer) of the workshop models at their seeds' batch sizes
// (ResNet-18 on CIFAR-10's 32×32 images, as seed 002), on one and two
// threads, and reports images per second.
// bench/competitors/torch_train.py measures PyTorch on the same steps.
//
//	go test ./model/zoo -run '^$' -bench 'TrainStep|Inference' -count 3
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct {
		model     string
		batch     int
		recompute bool
	}{{"mnist", 64, false}, {"cifarnet", 128, false}, {"resnet18", 32, false}, {"resnet50", 32, false}, {"resnet50", 32, true}} {
		name := c.model
		if c.recompute {
			name += "-recompute" // checkpointed residual blocks
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/batch=%d/threads=%d", name, c.batch, threads), func(b *testing.B) {
				be := mustBackend(b, threads)
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
// batch 128, ResNet-18 at batch 32 (32×32) and ResNet-50 at batch 32
// (224×224), gradients off and weights frozen (nn.Freeze, as
// train.Evaluate and infer run them), and reports images per second.
func BenchmarkInference(b *testing.B) {
	for _, c := range []struct {
		model string
		batch int
	}{{"cifarnet", 128}, {"resnet18", 32}, {"resnet50", 32}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/batch=%d/threads=%d", c.model, c.batch, threads), func(b *testing.B) {
				inference(b, c.model, c.batch, threads)
			})
		}
	}
}

// inference times evaluation-mode forward passes of model at batch.
func inference(b *testing.B, model string, batch, threads int) {
	be := mustBackend(b, threads)
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	m, _ := New(model, be, rng)
	m.Net.SetTraining(false)
	nn.SetGradEnabled(m.Net, false)
	nn.Freeze(m.Net, true) // as train.Evaluate and infer run it
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

// BenchmarkSplitBackward times a pipeline stage's microbatches on one
// thread, as 1F1B runs the last stage (forward, then the whole backward,
// on one replica of the layers) and as the zero-bubble schedule runs it
// (forward, the input gradient B, and the previous microbatch's deferred
// weight passes W, on two replicas drawing on one buffer pool): the
// second half of ResNet-50 (layer2.2…fc, a 2-stage cut) at microbatch 8,
// and CIFARNet from conv4 at microbatch 32.
//
//	go test ./model/zoo -run '^$' -bench SplitBackward -count 3
func BenchmarkSplitBackward(b *testing.B) {
	for _, c := range []struct {
		model     string
		lo, micro int
	}{{"resnet50", 9, 8}, {"cifarnet", 11, 32}} {
		for _, split := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/split=%v", c.model, split), func(b *testing.B) {
				be := mustBackend(b, 1)
				defer be.Close()
				spec, err := Lookup(c.model)
				if err != nil {
					b.Fatal(err)
				}
				net := spec.BuildPieces(be, 1, c.lo, len(spec.Pieces()))
				replicas := []nn.Layer{net}
				if split {
					nn.DeferWeightGrads(net, true)
					replicas = append(replicas, net.Replica())
					nn.ShareBuffers(net, replicas[1])
				}
				rng := rand.New(rand.NewPCG(1, 2))
				in := spec.BuildPieces(be, 1, 0, c.lo)
				x0 := tensor.New(append([]int{c.micro}, spec.Input...)...)
				for i := range x0.Data {
					x0.Data[i] = rng.Float32()
				}
				h, err := in.Forward(x0)
				if err != nil {
					b.Fatal(err)
				}
				x := tensor.New(h.Shape...)
				copy(x.Data, h.Data)
				var dy *tensor.Tensor
				k := 0
				micro := func() {
					r := replicas[k%len(replicas)]
					y, err := r.Forward(x)
					if err != nil {
						b.Fatal(err)
					}
					if dy == nil {
						dy = tensor.New(y.Shape...)
						for i := range dy.Data {
							dy.Data[i] = rng.Float32() - 0.5
						}
					}
					if _, err := r.Backward(dy); err != nil {
						b.Fatal(err)
					}
					if split && k > 0 {
						nn.WeightGrads(replicas[(k-1)%len(replicas)])
					}
					k++
				}
				micro()
				micro()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					micro()
				}
			})
		}
	}
}

// mustBackend is cpu.NewFromEnv for a benchmark: GORUN_CPU_KERNEL picks
// the micro-kernel, so that two can be compared on one CPU.
func mustBackend(b *testing.B, threads int) *cpu.Backend {
	be, err := cpu.NewFromEnv(threads)
	if err != nil {
		b.Fatal(err)
	}
	return be
}
