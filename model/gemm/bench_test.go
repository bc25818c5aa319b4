package gemm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gorun/gorun/model/parallel"
)

// BenchmarkSgemm reports GFLOP/s for square products and for the shapes the
// convolutions of CIFARNet produce per image (M = output channels,
// N = output pixels, K = input channels × 9), single- and two-threaded.
//
//	go test ./model/gemm -run '^$' -bench Sgemm -count 5
func BenchmarkSgemm(b *testing.B) {
	type shape struct {
		name    string
		m, n, k int
	}
	shapes := []shape{
		{"square128", 128, 128, 128}, {"square256", 256, 256, 256}, {"square512", 512, 512, 512}, {"square1024", 1024, 1024, 1024},
		{"cifar_conv1", 64, 1024, 27}, {"cifar_conv2", 128, 256, 576}, {"cifar_conv3", 256, 64, 1152}, {"cifar_conv4", 512, 64, 2304},
	}
	for _, kind := range []string{"best", "purego"} {
		for _, threads := range []int{1, 2} {
			var e *Engine
			if kind == "best" {
				e = benchEngine(b, threads)
			} else {
				e = NewPureGo(threads)
			}
			for _, s := range shapes {
				if kind == "purego" && s.m*s.n*s.k > 1<<27 {
					continue
				}
				b.Run(fmt.Sprintf("%s/threads=%d/%s", kind, threads, s.name), func(b *testing.B) {
					r := rand.New(rand.NewPCG(1, 1))
					x, y, z := randomMatrix(r, s.m, s.k, 0, false), randomMatrix(r, s.k, s.n, 0, false), randomMatrix(r, s.m, s.n, 0, false)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := e.Sgemm(s.m, s.n, s.k, 1, x, y, 0, z); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
			e.Close()
		}
	}
}

// BenchmarkUnpackedA runs products from 32 to 384 columns wide on one
// thread with the best kernel as New picks it ("unpacked": A read in
// place where directA allows) and with its tileRows removed ("packed"):
// the evidence for directAMaxCols. Skipped on CPUs whose kernel has no
// tileRows.
//
//	go test ./model/gemm -run '^$' -bench UnpackedA -count 3
func BenchmarkUnpackedA(b *testing.B) {
	k := benchKernel(b)
	if k.tileRows == nil {
		b.Skipf("kernel %s reads A packed only", k.name)
	}
	packed := k
	packed.tileRows = nil
	benchPackedAgainst(b, packed, k, [][3]int{{256, 32, 1152}, {256, 64, 1152}, {256, 96, 1152}, {256, 128, 1152}, {256, 192, 1152}, {256, 256, 1152}, {256, 384, 1152}, {512, 49, 2048}, {2048, 49, 512}, {128, 256, 576}, {256, 256, 256}})
}

// BenchmarkUnpackedB runs short products on one thread with the best
// kernel as New picks it ("unpacked": B read in place where directB
// allows) and with its tileColsB removed ("packed"): ResNet-50's (64 and
// 128 rows: its layer1 and layer2 1×1 convolutions forward and their data
// gradients over 56×56 and 28×28 maps, the products of its Winograd
// layers), the MNIST net's (32×338×64), and three control rows that
// directB leaves packed in both (196 columns, 32 deep, 256 rows): the
// evidence for directBMaxRows, directBMinCols and directBMinDepth.
// Skipped on CPUs whose kernel has no tileColsB.
//
//	go test ./model/gemm -run '^$' -bench UnpackedB -count 3
func BenchmarkUnpackedB(b *testing.B) {
	k := benchKernel(b)
	if k.tileColsB == nil {
		b.Skipf("kernel %s reads B packed only", k.name)
	}
	packed := k
	packed.tileColsB = nil
	benchPackedAgainst(b, packed, k, [][3]int{{64, 3136, 64}, {64, 3136, 256}, {128, 3136, 256}, {128, 784, 128}, {128, 784, 512}, {64, 784, 64}, {128, 392, 128}, {32, 338, 64}, {64, 196, 1024}, {64, 288, 32}, {256, 784, 128}})
}

// BenchmarkShortTiles runs products whose last panel of A is short on
// one thread with the best kernel as New picks it, or as
// GORUN_CPU_KERNEL names it ("short": that panel run by a short tile,
// shortFor), and with its short tiles removed ("full": every panel run
// by the full tile): ResNet-50's stem (64 rows, 147 deep) and layer1 1×1
// forward (64×3136×64, B read unpacked), its 128-, 256- and 1024-row
// products (an 8- or 4-row last panel with 12-row tiles, 2 or 4 with
// 6-row ones) and the MNIST net's first convolution (32 rows). Skipped
// on CPUs whose kernel has no short tiles.
//
//	go test ./model/gemm -run '^$' -bench ShortTiles -count 3
func BenchmarkShortTiles(b *testing.B) {
	k := benchKernel(b)
	if len(k.short) == 0 {
		b.Skipf("kernel %s has no short tiles", k.name)
	}
	full := k
	full.short = nil
	benchVariants(b, []benchVariant{{"full", full}, {"short", k}}, [][3]int{{64, 3136, 147}, {64, 3136, 64}, {128, 784, 128}, {256, 784, 128}, {1024, 196, 256}, {32, 676, 9}})
}

// benchPackedAgainst runs each m×n×k product of shapes on one thread,
// first with the kernel packed, then with unpacked, and reports GFLOP/s.
func benchPackedAgainst(b *testing.B, packed, unpacked kernel, shapes [][3]int) {
	benchVariants(b, []benchVariant{{"packed", packed}, {"unpacked", unpacked}}, shapes)
}

// benchVariant is one of the kernels benchVariants compares, by name.
type benchVariant struct {
	name string
	k    kernel
}

// benchVariants runs each m×n×k product of shapes on one thread with each
// variant's kernel in turn and reports GFLOP/s.
func benchVariants(b *testing.B, variants []benchVariant, shapes [][3]int) {
	p := parallel.New(1)
	defer p.Close()
	for _, s := range shapes {
		for _, v := range variants {
			e := newEngine(p, false, v.k)
			b.Run(fmt.Sprintf("%dx%dx%d/%s", s[0], s[1], s[2], v.name), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 1))
				x, y, z := randomMatrix(r, s[0], s[2], 0, false), randomMatrix(r, s[2], s[1], 0, false), randomMatrix(r, s[0], s[1], 0, false)
				for b.Loop() {
					if err := e.Sgemm(s[0], s[1], s[2], 1, x, y, 0, z); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*float64(s[0]*s[1]*s[2])*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkMicroKernel runs the micro-kernel alone on L1-resident packed
// panels: its GFLOP/s is the practical FMA peak of one core, against which
// the full SGEMM figures are read.
func BenchmarkMicroKernel(b *testing.B) {
	k := benchKernel(b)
	const kc = 256
	a, bp, c := make([]float32, k.mr*kc), make([]float32, k.nr*kc), make([]float32, k.mr*k.nr)
	for i := range a {
		a[i] = 1e-3
	}
	for i := range bp {
		bp[i] = 1e-3
	}
	b.Run(k.name, func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			k.tile(kc, a, bp, c, k.nr, true)
		}
		b.ReportMetric(2*float64(k.mr*k.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkMicroKernelDepth runs the micro-kernel on L1-resident panels
// at the depths convolutions hand it (27: a 3-channel 3×3 layer, 64: a
// 64-channel 1×1 layer, 256: a full block), storing and accumulating: how
// far a shallow product falls below the peak of BenchmarkMicroKernel.
//
//	go test ./model/gemm -run '^$' -bench MicroKernelDepth
func BenchmarkMicroKernelDepth(b *testing.B) {
	k := benchKernel(b)
	for _, kc := range []int{9, 16, 27, 32, 64, 128, 256} {
		a, bp, c := make([]float32, k.mr*kc), make([]float32, k.nr*kc), make([]float32, k.mr*k.nr)
		for _, add := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/depth=%d/add=%v", k.name, kc, add), func(b *testing.B) {
				for b.Loop() {
					k.tile(kc, a, bp, c, k.nr, add)
				}
				b.ReportMetric(2*float64(k.mr*k.nr*kc)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkConvProducts runs the three products of one image of the MNIST
// net's second convolution (32→64 channels, 3×3, 24×24 outputs) as the CPU
// backend calls them: forward W·col, weight gradient dY·colᵀ (B transposed)
// and data gradient Wᵀ·dY (A transposed), where packing the transposed
// operands costs as much as the arithmetic on these small shapes.
//
//	go test ./model/gemm -run '^$' -bench ConvProducts
func BenchmarkConvProducts(b *testing.B) {
	const f, ckk, pix = 64, 288, 576
	for _, s := range []struct {
		name    string
		m, n, k int
		ta, tb  bool
		beta    float32
	}{
		{"forward", f, pix, ckk, false, false, 0},
		{"weight-grad", f, ckk, pix, false, true, 1},
		{"data-grad", ckk, pix, f, true, false, 0},
	} {
		b.Run(s.name, func(b *testing.B) {
			e := benchEngine(b, 1)
			defer e.Close()
			r := rand.New(rand.NewPCG(1, 1))
			x, y, z := randomMatrix(r, s.m, s.k, 0, s.ta), randomMatrix(r, s.k, s.n, 0, s.tb), randomMatrix(r, s.m, s.n, 0, false)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := e.Sgemm(s.m, s.n, s.k, 1, x, y, s.beta, z); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// benchKernel is the micro-kernel the benchmarks time: the one
// GORUN_CPU_KERNEL names (as the trainer's override), else this CPU's
// best, so that two kernels can be compared on one CPU.
func benchKernel(b *testing.B) kernel {
	name := os.Getenv("GORUN_CPU_KERNEL")
	if name == "" {
		return bestKernel()
	}
	k, err := kernelNamed(name)
	if err != nil {
		b.Fatalf("GORUN_CPU_KERNEL: %v", err)
	}
	return k
}

// benchEngine is an engine of its own on threads threads running
// benchKernel's micro-kernel.
func benchEngine(b *testing.B, threads int) *Engine {
	return newEngine(parallel.New(threads), true, benchKernel(b))
}
