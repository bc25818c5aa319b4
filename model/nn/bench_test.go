package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
)

// BenchmarkConvLayer times forward + backward of CIFARNet's convolutions at
// batch 32, one and two threads; bench/competitors/torch_layers.py times
// the same layers in PyTorch.
//
//	go test ./model/nn -run '^$' -bench ConvLayer -count 3
func BenchmarkConvLayer(b *testing.B) {
	shapes := []struct {
		name        string
		in, out, hw int
	}{{"conv1_3x64x32", 3, 64, 32}, {"conv2_64x128x16", 64, 128, 16}, {"conv3_128x256x8", 128, 256, 8}, {"conv4_256x512x8", 256, 512, 8}}
	for _, threads := range []int{1, 2} {
		be := mustBackend(b, threads)
		for _, s := range shapes {
			b.Run(fmt.Sprintf("threads=%d/%s", threads, s.name), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				c := NewConv2d(be, s.in, s.out, 3, Conv2dOptions{Padding: 1}, rng)
				x := randTensor(rng, 32, s.in, s.hw, s.hw)
				y, _ := c.Forward(x)
				dy := randTensor(rng, y.Shape...)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := c.Forward(x); err != nil {
						b.Fatal(err)
					}
					if _, err := c.Backward(dy); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		be.Close()
	}
}

// convShape is a network's convolution: name, channels in and out,
// kernel, stride, input size, and how many of the network's convolutions
// have the shape.
type convShape struct {
	name                   string
	in, out, k, stride, hw int
	count                  int
}

// resnet50Convs are ResNet-50's distinct convolutions (torchvision's v1.5:
// stride in the 3×3); counts sum to its 53.
var resnet50Convs = []convShape{
	{"stem_3x64_7x7s2_224", 3, 64, 7, 2, 224, 1},
	{"l1_64x64_1x1_56", 64, 64, 1, 1, 56, 1},
	{"l1_64x64_3x3_56", 64, 64, 3, 1, 56, 3},
	{"l1_64x256_1x1_56", 64, 256, 1, 1, 56, 4},
	{"l1_256x64_1x1_56", 256, 64, 1, 1, 56, 2},
	{"l2_256x128_1x1_56", 256, 128, 1, 1, 56, 1},
	{"l2_128x128_3x3s2_56", 128, 128, 3, 2, 56, 1},
	{"l2_256x512_1x1s2_56", 256, 512, 1, 2, 56, 1},
	{"l2_128x128_3x3_28", 128, 128, 3, 1, 28, 3},
	{"l2_128x512_1x1_28", 128, 512, 1, 1, 28, 4},
	{"l2_512x128_1x1_28", 512, 128, 1, 1, 28, 3},
	{"l3_512x256_1x1_28", 512, 256, 1, 1, 28, 1},
	{"l3_256x256_3x3s2_28", 256, 256, 3, 2, 28, 1},
	{"l3_512x1024_1x1s2_28", 512, 1024, 1, 2, 28, 1},
	{"l3_256x256_3x3_14", 256, 256, 3, 1, 14, 5},
	{"l3_256x1024_1x1_14", 256, 1024, 1, 1, 14, 6},
	{"l3_1024x256_1x1_14", 1024, 256, 1, 1, 14, 5},
	{"l4_1024x512_1x1_14", 1024, 512, 1, 1, 14, 1},
	{"l4_512x512_3x3s2_14", 512, 512, 3, 2, 14, 1},
	{"l4_1024x2048_1x1s2_14", 1024, 2048, 1, 2, 14, 1},
	{"l4_512x512_3x3_7", 512, 512, 3, 1, 7, 2},
	{"l4_512x2048_1x1_7", 512, 2048, 1, 1, 7, 3},
	{"l4_2048x512_1x1_7", 2048, 512, 1, 1, 7, 2},
}

// resnet18Convs are the distinct convolutions of torchvision's ResNet-18
// on CIFAR-10's 32×32 images (seed 002), in resnet50Convs' columns: their
// maps end at 2×2 and 1×1, where the backend runs dense products.
var resnet18Convs = []convShape{
	{"stem_3x64_7x7s2_32", 3, 64, 7, 2, 32, 1},
	{"l1_64x64_3x3_8", 64, 64, 3, 1, 8, 4},
	{"l2_64x128_3x3s2_8", 64, 128, 3, 2, 8, 1},
	{"l2_64x128_1x1s2_8", 64, 128, 1, 2, 8, 1},
	{"l2_128x128_3x3_4", 128, 128, 3, 1, 4, 3},
	{"l3_128x256_3x3s2_4", 128, 256, 3, 2, 4, 1},
	{"l3_128x256_1x1s2_4", 128, 256, 1, 2, 4, 1},
	{"l3_256x256_3x3_2", 256, 256, 3, 1, 2, 3},
	{"l4_256x512_3x3s2_2", 256, 512, 3, 2, 2, 1},
	{"l4_256x512_1x1s2_2", 256, 512, 1, 2, 2, 1},
	{"l4_512x512_3x3_1", 512, 512, 3, 1, 1, 3},
}

// BenchmarkResNet50Convs times each of ResNet-50's distinct convolutions
// at batch 32, one thread, forward alone (inference) and forward +
// backward (training), reporting GFLOP/s (2 FLOPs a multiply-add, 3× the
// forward's for training); `torch_layers.py 1 resnet50` times the same
// layers in PyTorch. The "count" column of resnet50Convs weighs them
// into a network's time.
//
//	go test ./model/nn -run '^$' -bench ResNet50Convs -benchtime 3x
func BenchmarkResNet50Convs(b *testing.B) { benchConvs(b, resnet50Convs) }

// BenchmarkResNet18Convs is BenchmarkResNet50Convs for ResNet-18 on
// CIFAR-10 (resnet18Convs; `torch_layers.py 1 resnet18`).
//
//	go test ./model/nn -run '^$' -bench ResNet18Convs -benchtime 20x
func BenchmarkResNet18Convs(b *testing.B) { benchConvs(b, resnet18Convs) }

// benchConvs times each layer of convs, forward and training, at batch
// 32 on one thread.
func benchConvs(b *testing.B, convs []convShape) {
	be := mustBackend(b, 1)
	defer be.Close()
	for _, s := range convs {
		// Each layer is built inside its own sub-benchmark, so a -bench
		// filter naming one layer times (and profiles) that layer alone.
		b.Run(s.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			c := NewConv2d(be, s.in, s.out, s.k, Conv2dOptions{Stride: s.stride, Padding: s.k / 2, NoBias: true}, rng)
			x := randTensor(rng, 32, s.in, s.hw, s.hw)
			y, err := c.Forward(x)
			if err != nil {
				b.Fatal(err)
			}
			dy := randTensor(rng, y.Shape...)
			// One backward pass before the timed ones, as the forward
			// above: the first allocates the layer's gradient buffers
			// (ResNet-50's 256→64 1×1 layer ran 161 ms a pass over three
			// timed passes without it, 72 over thirty), and
			// torch_layers.py times PyTorch's after a warm-up call too.
			if _, err := c.Backward(dy); err != nil {
				b.Fatal(err)
			}
			macs := float64(32 * s.out * y.Shape[2] * y.Shape[3] * s.in * s.k * s.k)
			for _, mode := range []string{"forward", "training"} {
				b.Run(mode, func(b *testing.B) {
					for b.Loop() {
						if _, err := c.Forward(x); err != nil {
							b.Fatal(err)
						}
						if mode == "training" {
							if _, err := c.Backward(dy); err != nil {
								b.Fatal(err)
							}
						}
					}
					flops := 2 * macs
					if mode == "training" {
						flops *= 3
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		})
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

// BenchmarkCheckpointedBottleneck times a training pass (forward, then
// backward with its recomputation) through one checkpointed Bottleneck
// of ResNet-50, its 3×3 convolution's output saved as `train
// --recompute` saves it: an identity block of layer1 (256 → 64 → 256
// channels, 56×56) and of layer3 (1024 → 256 → 1024, 14×14), batch 32,
// one thread.
//
//	go test ./model/nn -run '^$' -bench CheckpointedBottleneck -benchtime 5x
func BenchmarkCheckpointedBottleneck(b *testing.B) {
	be := mustBackend(b, 1)
	defer be.Close()
	for _, s := range []struct {
		name          string
		in, width, hw int
	}{{"layer1_256x64_56", 256, 64, 56}, {"layer3_1024x256_14", 1024, 256, 14}} {
		b.Run(s.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			block := NewBottleneck(be, s.in, s.width, 1, rng)
			cp := NewCheckpoint(be, block)
			if err := cp.Save(block.Main[3].Layer.(*Conv2d)); err != nil {
				b.Fatal(err)
			}
			net := NewChain(Child{Name: "block", Layer: cp})
			x := randTensor(rng, 32, s.in, s.hw, s.hw)
			dy := randTensor(rng, 32, s.in, s.hw, s.hw)
			pass := func() {
				if _, err := net.Forward(x); err != nil {
					b.Fatal(err)
				}
				if _, err := net.Backward(dy); err != nil {
					b.Fatal(err)
				}
			}
			pass() // untimed: the first pass allocates the block's buffers (benchConvs)
			for b.Loop() {
				pass()
			}
			b.ReportMetric(float64(32*b.N)/b.Elapsed().Seconds(), "img/s")
		})
	}
}
