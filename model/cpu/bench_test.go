package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// reluBackwardBranchy is the obvious loop, kept to measure the branch-free
// one against: on ReLU outputs of random data its branch mispredicts about
// half the time.
func reluBackwardBranchy(y, dy, dx []float32) {
	for i, v := range y {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// BenchmarkReLUBackward compares the branch-free ReLU backward loop with
// the branchy loop on 256 Ki elements, half of them zero (its vector
// kernel: BenchmarkElementwiseKernels).
//
//	go test ./model/cpu -run '^$' -bench ReLUBackward -count 3
func BenchmarkReLUBackward(b *testing.B) {
	const n = 1 << 18
	rng := rand.New(rand.NewPCG(1, 2))
	y, dy, dx := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range y {
		y[i] = max(float32(rng.NormFloat64()), 0)
		dy[i] = float32(rng.NormFloat64())
	}
	for _, c := range []struct {
		name string
		fn   func(y, dy, dx []float32)
	}{
		{"branchless", func(y, dy, dx []float32) { vecOps{}.reluBackward(dx, dy, y) }},
		{"branchy", reluBackwardBranchy},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(3 * 4 * n)
			for b.Loop() {
				c.fn(y, dy, dx)
			}
		})
	}
}

// TestReLUBackwardMatchesBranchy checks the branch-free loop against the
// obvious one, zeros included (the vector kernel against the loop:
// TestVecOps).
func TestReLUBackwardMatchesBranchy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	y, dy := make([]float32, 1000), make([]float32, 1000)
	for i := range y {
		y[i] = max(float32(rng.NormFloat64()), 0)
		dy[i] = float32(rng.NormFloat64())
	}
	y[0], y[1] = 0, 1e-45 // zero, and the smallest positive
	got, want := make([]float32, 1000), make([]float32, 1000)
	vecOps{}.reluBackward(got, dy, y)
	reluBackwardBranchy(y, dy, want)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("element %d (y=%v): %v, want %v", i, y[i], got[i], want[i])
		}
	}
}

// BenchmarkConvAlgorithms times forward + backward (data and weight
// gradients) of the 3×3 stride-1 convolutions of CIFARNet, ResNet-50 and
// ResNet-18 on CIFAR-10 as im2col + GEMM and as Winograd F(2×2, 3×3),
// one thread, batch 32 (8 for ResNet-50's 56×56 layer): the measurement
// behind useWinograd's choice. winograd-loops runs the transforms without
// the vector kernels of vecops_amd64.s: the measurement behind them. auto
// is the backend's own choice, a dense product (dense.go) on the maps no
// larger than the kernel.
//
//	go test ./model/cpu -run '^$' -bench ConvAlgorithms -count 5
func BenchmarkConvAlgorithms(b *testing.B) {
	for _, s := range []struct {
		name        string
		n, c, f, hw int
	}{
		{"cifar_conv1_3x64x32", 32, 3, 64, 32},
		{"cifar_conv2_64x128x16", 32, 64, 128, 16},
		{"cifar_conv3_128x256x8", 32, 128, 256, 8},
		{"cifar_conv4_256x512x8", 32, 256, 512, 8},
		{"resnet_64x64x56", 8, 64, 64, 56},
		{"resnet_128x128x28", 32, 128, 128, 28},
		{"resnet_256x256x14", 32, 256, 256, 14},
		{"resnet_512x512x7", 32, 512, 512, 7},
		{"resnet18_64x64x8", 32, 64, 64, 8}, // ResNet-18 on CIFAR-10's 32×32 images
		{"resnet18_128x128x4", 32, 128, 128, 4},
		{"resnet18_256x256x2", 32, 256, 256, 2},
		{"resnet18_512x512x1", 32, 512, 512, 1},
		{"thin_16x16x32", 32, 16, 16, 32},
		{"thin_32x32x32", 32, 32, 32, 32},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		x, w, y, p := sameConv3x3(rng, s.n, s.c, s.f, s.hw)
		bias := randTensor(rng, s.f)
		dy, dx, dw, db := randTensor(rng, y.Shape...), tensor.New(x.Shape...), tensor.New(w.Shape...), tensor.New(s.f)
		for _, a := range []struct {
			name  string
			algo  ConvAlgorithm
			loops bool // the transforms without the vector kernels
		}{{"im2col", ConvIm2col, false}, {"winograd", ConvWinograd, false}, {"winograd-loops", ConvWinograd, true}, {"auto", ConvAuto, false}} {
			b.Run(s.name+"/"+a.name, func(b *testing.B) {
				be := New(1)
				defer be.Close()
				be.SetConvAlgorithm(a.algo)
				if a.loops {
					be.vec = vecOps{}
				}
				for b.Loop() {
					be.Conv2d(x, w, bias, y, p)
					be.Conv2dBackward(x, w, dy, dx, dw, db, p)
				}
				b.ReportMetric(float64(s.n*b.N)/b.Elapsed().Seconds(), "img/s")
			})
		}
	}
}

// BenchmarkDenseForward times the forward pass alone (inference's) of
// ResNet-18's convolutions on CIFAR-10's smallest maps, which run as one
// dense product (dense.go), batch 32, one and two threads.
//
//	go test ./model/cpu -run '^$' -bench DenseForward -count 5
func BenchmarkDenseForward(b *testing.B) {
	for _, s := range []struct {
		name             string
		c, f, hw, stride int
	}{
		{"resnet18_256x256x2", 256, 256, 2, 1},
		{"resnet18_256x512x2s2", 256, 512, 2, 2},
		{"resnet18_512x512x1", 512, 512, 1, 1},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		p := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: s.stride, StrideW: s.stride, PadH: 1, PadW: 1}
		x, w := randTensor(rng, 32, s.c, s.hw, s.hw), randTensor(rng, s.f, s.c, 3, 3)
		oh, ow := p.OutSize(s.hw, s.hw)
		y := tensor.New(32, s.f, oh, ow)
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", s.name, threads), func(b *testing.B) {
				be := New(threads)
				defer be.Close()
				if !be.useDense(geom(x, w, p), p) {
					b.Fatal("not a dense product")
				}
				for b.Loop() {
					be.Conv2d(x, w, nil, y, p)
				}
				b.ReportMetric(float64(32*b.N)/b.Elapsed().Seconds(), "img/s")
			})
		}
	}
}

// BenchmarkMaxPoolBackward times the 2×2 max-pooling backward pass on the
// MNIST net's shape (batch 64, 64 channels of 24×24), one thread.
//
//	go test ./model/cpu -run '^$' -bench MaxPoolBackward -count 5
func BenchmarkMaxPoolBackward(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	p := tensor.PoolParams{KernelH: 2, KernelW: 2, StrideH: 2, StrideW: 2}
	x := randTensor(rng, 64, 64, 24, 24)
	dy, dx := randTensor(rng, 64, 64, 12, 12), tensor.New(x.Shape...)
	be := New(1)
	defer be.Close()
	b.SetBytes(int64(4 * (2*len(x.Data) + len(dy.Data))))
	for b.Loop() {
		be.MaxPool2dBackward(x, dy, dx, p)
	}
}

// BenchmarkMaxPool times ResNet's 3×3, stride 2, padding 1 max pooling
// forward on its stem's output (batch 32, 64 channels of 112×112, relu'd
// as there), one thread.
//
//	go test ./model/cpu -run '^$' -bench 'MaxPool$' -count 5
func BenchmarkMaxPool(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	p := tensor.PoolParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	x := randTensor(rng, 32, 64, 112, 112)
	for i, v := range x.Data {
		x.Data[i] = max(v, 0)
	}
	y := tensor.New(32, 64, 56, 56)
	be := New(1)
	defer be.Close()
	b.SetBytes(int64(4 * (len(x.Data) + len(y.Data))))
	for b.Loop() {
		be.MaxPool2d(x, y, p)
	}
}

// BenchmarkElementwiseKernels times the element-wise vector kernels
// against their loops (the same bits: TestVecOps) on 256 Ki elements a
// tensor, 1 MiB each: the measurement behind each kernel.
//
//	go test ./model/cpu -run '^$' -bench ElementwiseKernels -count 3
func BenchmarkElementwiseKernels(b *testing.B) {
	const n = 1 << 18
	rng := rand.New(rand.NewPCG(5, 6))
	vec := func() []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	positive := func() []float32 {
		v := vec()
		for i := range v {
			v[i] = max(v[i], -v[i])
		}
		return v
	}
	x, y, z, w, u := vec(), vec(), positive(), positive(), vec()
	ops := []struct {
		name string
		run  func(o vecOps)
	}{
		{"relu", func(o vecOps) { o.relu(y, x) }},
		{"add", func(o vecOps) { o.add(y, x, u) }},
		{"relu-backward", func(o vecOps) { o.reluBackward(u, x, z) }},
		{"max-pool", func(o vecOps) {
			for r := 0; r < n/512; r++ { // rows of 128 windows, from two input rows of 256
				o.maxPoolRow(y[r*128:(r+1)*128], x[2*r*256:(2*r+1)*256], x[(2*r+1)*256:(2*r+2)*256])
			}
		}},
		{"max-pool-backward", func(o vecOps) {
			for r := 0; r < n/512; r++ {
				o.maxPoolBackwardRow(y[2*r*256:(2*r+1)*256], u[2*r*256:(2*r+1)*256], x[2*r*256:(2*r+1)*256], x[(2*r+1)*256:(2*r+2)*256], z[r*128:(r+1)*128])
			}
		}},
		{"sgd-momentum", func(o vecOps) { o.sgdMomentum(y, x, u, 1e-6, 0, 0.9, 1) }},
		{"adadelta", func(o vecOps) { o.adadelta(y, x, z, w, 1e-6, 0.9, 1e-6, 0) }},
		{"adam", func(o vecOps) {
			o.adam(y, x, u, z, adamConsts{step: 1e-6, bc2: 0.5, eps: 1e-8, b1c: 0.1, b2: 0.999, b2c: 0.001})
		}},
		{"dropout", func(o vecOps) { o.dropout(y, u, x, 0.5, 2, 7, 0) }},
	}
	for _, op := range ops {
		for _, k := range []struct {
			name string
			o    vecOps
		}{{"loop", vecOps{}}, {"vector", vecOps{vector: hasVectorOps(), wide: hasWideOps()}}} {
			b.Run(op.name+"/"+k.name, func(b *testing.B) {
				b.SetBytes(4 * n)
				for b.Loop() {
					op.run(k.o)
				}
			})
		}
	}
}

// BenchmarkWinogradWeights times the weight transform of ResNet-50's
// largest 3×3 layer (512×512 kernels), forward and flipped, with the
// vector kernel and with the loops.
//
//	go test ./model/cpu -run '^$' -bench WinogradWeights -count 3
func BenchmarkWinogradWeights(b *testing.B) {
	const f, c = 512, 512
	rng := rand.New(rand.NewPCG(7, 8))
	w := make([]float32, f*c*9)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	u := make([]float32, 16*winoStride(f*c))
	var work winoRows
	for _, k := range []struct {
		name string
		o    vecOps
	}{{"loop", vecOps{}}, {"vector", vecOps{vector: hasVectorOps()}}} {
		for _, flipped := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/flipped=%v", k.name, flipped), func(b *testing.B) {
				b.SetBytes(4 * f * c * 9)
				for b.Loop() {
					winogradWeights(k.o, u, w, f, c, flipped, &work)
				}
			})
		}
	}
}

// BenchmarkMaxPool3x3 times ResNet's stem max pool (3×3, stride 2,
// padding 1) forward and backward, one thread: 4 images of 64×112×112
// (ImageNet's) and 32 of 64×16×16 (CIFAR-10's, seed 002's batch).
//
//	go test ./model/cpu -run '^$' -bench MaxPool3x3 -count 3
func BenchmarkMaxPool3x3(b *testing.B) {
	be := New(1)
	defer be.Close()
	p := tensor.PoolParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	for _, c := range []struct{ n, side int }{{4, 112}, {32, 16}} {
		rng := rand.New(rand.NewPCG(11, 12))
		x := tensor.New(c.n, 64, c.side, c.side)
		for i := range x.Data {
			x.Data[i] = float32(rng.NormFloat64())
		}
		oh, ow := p.OutSize(c.side, c.side)
		y, dy, dx := tensor.New(c.n, 64, oh, ow), tensor.New(c.n, 64, oh, ow), tensor.New(x.Shape...)
		for i := range dy.Data {
			dy.Data[i] = float32(rng.NormFloat64())
		}
		name := fmt.Sprintf("%dx%d", c.side, c.side)
		b.Run(name+"/forward", func(b *testing.B) {
			for b.Loop() {
				be.MaxPool2d(x, y, p)
			}
		})
		b.Run(name+"/backward", func(b *testing.B) {
			for b.Loop() {
				be.MaxPool2dBackward(x, dy, dx, p)
			}
		})
	}
}

// BenchmarkIm2colStride2 times one image's im2col for ResNet-50's
// stride-2 convolutions (layer2's 3×3 at 56×56 and its 1×1 downsample,
// the stem's 7×7 at 224×224): the image laid out (padded, its columns
// split into even and odd) with the vector kernels and with the loops,
// then its column matrix.
//
//	go test ./model/cpu -run '^$' -bench Im2colStride2 -count 5
func BenchmarkIm2colStride2(b *testing.B) {
	for _, s := range []struct {
		name     string
		c, hw, k int
		pad      int
	}{{"3x3_128x56", 128, 56, 3, 1}, {"1x1_256x56", 256, 56, 1, 0}, {"7x7_3x224", 3, 224, 7, 3}} {
		p := tensor.ConvParams{KernelH: s.k, KernelW: s.k, StrideH: 2, StrideW: 2, PadH: s.pad, PadW: s.pad}
		rng := rand.New(rand.NewPCG(1, 2))
		x := randTensor(rng, 1, s.c, s.hw, s.hw)
		g := geom(x, tensor.New(1, s.c, s.k, s.k), p)
		lay := phasedLayout(g, p)
		img := make([]float32, lay.size())
		window := lay.window(make([]int, s.k*s.k), s.k)
		col := make([]float32, g.ckk*g.ohw)
		for _, ops := range []vecOps{{vector: hasVectorOps()}, {}} {
			b.Run(s.name+"/"+ops.name(), func(b *testing.B) {
				for b.Loop() {
					lay.fill(ops, img, x.Data)
					im2col(img, lay, window, col, g.ohw, g, 0, g.ckk, 0, g.ohw)
				}
			})
		}
	}
}

// BenchmarkConvOneImage times ResNet-50's strided and 1×1 convolutions
// on one image with two threads, as infer runs a photo: the image's
// products split over the threads (whole column matrices, as blocks would
// fall under the GEMM's size for splitting).
//
//	go test ./model/cpu -run '^$' -bench ConvOneImage
func BenchmarkConvOneImage(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name             string
		c, f, hw, k, pad int
		stride           int
	}{{"stem_7x7s2_224", 3, 64, 224, 7, 3, 2}, {"l2_3x3s2_56", 128, 128, 56, 3, 1, 2}, {"l4_3x3s2_14", 512, 512, 14, 3, 1, 2}, {"l3_1x1_14", 1024, 256, 14, 1, 0, 1}} {
		p := tensor.ConvParams{KernelH: c.k, KernelW: c.k, StrideH: c.stride, StrideW: c.stride, PadH: c.pad, PadW: c.pad}
		x, w := randTensor(rng, 1, c.c, c.hw, c.hw), randTensor(rng, c.f, c.c, c.k, c.k)
		oh, ow := p.OutSize(c.hw, c.hw)
		y := tensor.New(1, c.f, oh, ow)
		be := New(2)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				be.Conv2d(x, w, nil, y, p)
			}
		})
		be.Close()
	}
}

// BenchmarkWinogradLayouts times Winograd convolutions, forward alone
// and forward + backward, with the transforms over a channel's tiles at
// once (planes) and over a tile's channels at once (channels-last), one
// thread, batch 32, on maps from ResNet-18's on CIFAR-10 (4×4, 8×8) and
// CIFARNet's (8×8, 16×16) to ResNet-50's 7×7 and 14×14: the measurement
// behind winoLastMaxTileCols.
//
//	go test ./model/cpu -run '^$' -bench WinogradLayouts -count 3
func BenchmarkWinogradLayouts(b *testing.B) {
	for _, s := range []struct {
		name     string
		c, f, hw int
	}{
		{"resnet18_128x128x4", 128, 128, 4},
		{"resnet18_64x64x8", 64, 64, 8},
		{"cifar_conv3_128x256x8", 128, 256, 8},
		{"cifar_conv4_256x512x8", 256, 512, 8},
		{"resnet50_512x512x7", 512, 512, 7},
		{"cifar_conv2_64x128x16", 64, 128, 16},
		{"resnet50_256x256x14", 256, 256, 14},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		x, w, y, p := sameConv3x3(rng, 32, s.c, s.f, s.hw)
		dy, dx, dw := randTensor(rng, y.Shape...), tensor.New(x.Shape...), tensor.New(w.Shape...)
		for _, l := range []struct {
			name   string
			layout winoLayout
		}{{"planes", winoPlanes}, {"channels-last", winoChannelsLast}} {
			for _, pass := range []string{"forward", "training"} {
				b.Run(s.name+"/"+pass+"/"+l.name, func(b *testing.B) {
					be := New(1)
					defer be.Close()
					be.SetConvAlgorithm(ConvWinograd)
					be.winoLayout = l.layout
					for b.Loop() {
						be.Conv2d(x, w, nil, y, p)
						if pass == "training" {
							be.Conv2dBackward(x, w, dy, dx, dw, nil, p)
						}
					}
					b.ReportMetric(float64(32*b.N)/b.Elapsed().Seconds(), "img/s")
				})
			}
		}
	}
}

// BenchmarkWinogradTiles times the forward pass of 3×3 stride-1 layers as
// Winograd F(2×2, 3×3) (the layout the backend chooses) and F(4×4, 3×3),
// one thread, batch 32 (8 for ResNet-50's 56×56 layer): the measurement
// behind useWinograd4's choice.
//
//	go test ./model/cpu -run '^$' -bench WinogradTiles -count 3
func BenchmarkWinogradTiles(b *testing.B) {
	for _, s := range []struct {
		name        string
		n, c, f, hw int
	}{
		{"resnet18_128x128x4", 32, 128, 128, 4},
		{"resnet18_64x64x8", 32, 64, 64, 8},
		{"cifar_conv3_128x256x8", 32, 128, 256, 8},
		{"cifar_conv4_256x512x8", 32, 256, 512, 8},
		{"cifar_conv2_64x128x16", 32, 64, 128, 16},
		{"resnet50_512x512x7", 32, 512, 512, 7},
		{"resnet50_256x256x14", 32, 256, 256, 14},
		{"resnet50_128x128x28", 32, 128, 128, 28},
		{"resnet50_64x64x56", 8, 64, 64, 56},
	} {
		rng := rand.New(rand.NewPCG(1, 1))
		x, w, y, p := sameConv3x3(rng, s.n, s.c, s.f, s.hw)
		for _, tile := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/tile=%d", s.name, tile), func(b *testing.B) {
				be := New(1)
				defer be.Close()
				be.SetConvAlgorithm(ConvWinograd)
				be.winoTile = tile
				for b.Loop() {
					be.Conv2d(x, w, nil, y, p)
				}
				b.ReportMetric(float64(s.n*b.N)/b.Elapsed().Seconds(), "img/s")
			})
		}
	}
}

// sameConv3x3 is a 3×3, stride-1, padding-1 layer from c to f channels
// on n images of hw×hw, the benchmarks' Winograd shape: a random input
// and kernel, the output's storage and the params.
func sameConv3x3(rng *rand.Rand, n, c, f, hw int) (x, w, y *tensor.Tensor, p tensor.ConvParams) {
	p = tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	return randTensor(rng, n, c, hw, hw), randTensor(rng, f, c, 3, 3), tensor.New(n, f, hw, hw), p
}
