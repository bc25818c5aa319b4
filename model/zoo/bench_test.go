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
			var run *built // a training step
			b.Run(fmt.Sprintf("%s/batch=%d/threads=%d", name, c.batch, threads), func(b *testing.B) {
				if run == nil {
					run = &built{be: mustBackend(b, threads)}
					rng := rand.New(rand.NewPCG(1, 2))
					spec, err := Lookup(c.model)
					if err != nil {
						b.Fatal(err)
					}
					spec.Recompute = c.recompute
					m := spec.Build(run.be, rng.Uint64())
					run.pass = newTrainStep(b, run.be, m, c.batch, rng)
					run.pass() // warm-up: buffers, packed forms
				}
				run.time(b, c.batch)
			})
			run.close()
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
			var run *built // an evaluation pass
			b.Run(fmt.Sprintf("%s/batch=%d/threads=%d", c.model, c.batch, threads), func(b *testing.B) {
				if run == nil {
					run = &built{be: mustBackend(b, threads)}
					run.pass = newEvalPass(b, run.be, c.model, c.batch)
					run.pass() // warm-up: buffers, prepared weights
				}
				run.time(b, c.batch)
			})
			run.close()
		}
	}
}

// newEvalPass builds model on be, frozen for evaluation with gradients
// off (as train.Evaluate and infer run it), and returns an evaluation
// pass over a batch of random images.
func newEvalPass(b *testing.B, be tensor.Backend, model string, batch int) func() {
	rng := rand.New(rand.NewPCG(1, 2))
	m, err := New(model, be, rng)
	if err != nil {
		b.Fatal(err)
	}
	m.Net.SetTraining(false)
	nn.SetGradEnabled(m.Net, false)
	nn.Freeze(m.Net, true)
	x := tensor.New(append([]int{batch}, m.Input...)...)
	for i := range x.Data {
		x.Data[i] = rng.Float32()
	}
	return func() {
		if _, err := m.Net.Forward(x); err != nil {
			b.Fatal(err)
		}
	}
}

// built is what a sub-benchmark builds — a backend, and a pass over a
// model built on it — kept from its first call to the next. The testing
// package calls every benchmark once with b.N = 1 before its timed run;
// building the model again there made the process hold two models' worth
// of pages where a user's holds one: ResNet-50's evaluation at batch 32
// peaked at 369 MiB of RSS instead of 270, its second model's untouched
// gradient buffers cleared on pages the first had used (2026-11-29, Zen 3).
// bench/resnet50.sh reports that peak beside PyTorch's.
type built struct {
	be   *cpu.Backend
	pass func()
}

// time times b.N passes of batch images each and reports images per
// second.
func (r *built) time(b *testing.B, batch int) {
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.pass()
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "img/s")
}

// close closes the backend, if the sub-benchmark ran (a -bench filter may
// skip it).
func (r *built) close() {
	if r != nil {
		r.be.Close()
	}
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
