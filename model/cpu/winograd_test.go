package cpu

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// TestWinograd checks Winograd convolutions (forced on) against the
// float64 definition: forward, data and weight gradients, bias gradient,
// for even and odd feature maps (a tile past the edge), non-square maps,
// paddings 0, 1 and 2, one image per group and several (with a ragged last
// group), one image with the products split over threads, without a data
// gradient (a first layer), on 1 and 2 threads. The error bound is
// relative to the sum of the magnitudes each result adds up.
func TestWinograd(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cases := []struct {
		n, c, f, h, w, pad int
		noDX               bool
	}{
		{20, 4, 6, 8, 8, 1, false},    // 16 tiles an image: a group of 16 images and a ragged one of 4 (1 thread)
		{3, 3, 5, 7, 7, 1, false},     // odd: the last tiles half outside
		{2, 5, 3, 6, 11, 1, false},    // not square
		{3, 2, 4, 9, 8, 0, false},     // no padding: 7×6 outputs
		{2, 3, 4, 10, 8, 0, false},    // no padding, 8×6 outputs: the image's rows read in place
		{2, 3, 2, 5, 6, 2, false},     // padding 2: 7×8 outputs
		{1, 16, 24, 12, 12, 1, false}, // one image: products over threads
		{4, 3, 8, 32, 32, 1, true},    // 256 tiles an image: one per group; no dx
		{9, 64, 72, 4, 4, 1, false},   // channels past the automatic threshold
	}
	worst := 0.0 // the largest error, as a fraction of its bound
	for _, run := range []struct {
		threads int
		layout  winoLayout
	}{{1, winoPlanes}, {2, winoPlanes}, {1, winoChannelsLast}, {2, winoChannelsLast}} {
		threads := run.threads
		be := New(threads)
		be.SetConvAlgorithm(ConvWinograd)
		be.winoLayout = run.layout
		be.winoTile = 2 // F(4×4, 3×3): TestWinograd4
		for _, c := range cases {
			p := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: c.pad, PadW: c.pad}
			x := randTensor(rng, c.n, c.c, c.h, c.w)
			w := randTensor(rng, c.f, c.c, 3, 3)
			bias := randTensor(rng, c.f)
			oh, ow := p.OutSize(c.h, c.w)
			y := tensor.New(c.n, c.f, oh, ow)
			dy := randTensor(rng, y.Shape...)
			dx, dw, db := tensor.New(x.Shape...), tensor.New(w.Shape...), tensor.New(c.f)
			if !be.useWinograd(geom(x, w, p), p) {
				t.Fatalf("case %+v: Winograd not chosen", c)
			}
			be.Conv2d(x, w, bias, y, p)
			dxArg := dx
			if c.noDX {
				dxArg = nil
			}
			be.Conv2dBackward(x, w, dy, dxArg, dw, db, p)
			wy, wdx, wdw, wdb := referenceConv(x, w, bias, dy, p)
			// Each result sums about this many products of values below 3.
			terms := map[string]float64{"y": float64(9 * c.c), "dx": float64(9 * c.f), "dw": float64(c.n * oh * ow), "db": float64(c.n * oh * ow)}
			results := []struct {
				name string
				got  []float32
				want []float64
			}{{"y", y.Data, wy}, {"dw", dw.Data, wdw}, {"db", db.Data, wdb}}
			if !c.noDX {
				results = append(results, struct {
					name string
					got  []float32
					want []float64
				}{"dx", dx.Data, wdx})
			}
			if !c.noDX {
				checkSplitBackward(t, be, x, w, dy, dx, dw, db, p, fmt.Sprintf("Winograd, threads %d, case %+v", threads, c))
			}
			for _, r := range results {
				tol := 2e-7 * 9 * terms[r.name]
				for i, v := range r.want {
					e := math.Abs(float64(r.got[i]) - v)
					if e > tol {
						t.Fatalf("threads %d, layout %d, case %+v: %s[%d] = %v, want %v (±%.2g)", threads, run.layout, c, r.name, i, r.got[i], v, tol)
					}
					worst = max(worst, e/tol)
				}
			}
		}
		be.Close()
	}
	t.Logf("the largest error is %.2g of its bound", worst)
}

// TestWinogradChannelsLast: the transforms with the channels innermost
// give the plane layout's bits — forward with and without a bias, the
// data, weight and bias gradients — with and without the vector
// kernels, on maps of one tile to past the automatic choice's width,
// odd, not square, and paddings 0 to 2.
func TestWinogradChannelsLast(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		n, c, f, h, w, pad int
	}{
		{3, 16, 24, 2, 2, 1}, // one tile an image
		{4, 33, 17, 4, 4, 1}, // ResNet-18's layer2 maps, ragged channels
		{2, 8, 8, 7, 5, 1},   // odd and not square
		{2, 5, 6, 6, 6, 0},   // no padding
		{2, 6, 5, 3, 4, 2},   // padding 2
		{5, 24, 16, 8, 8, 1}, // ResNet-18's layer1 maps
		{1, 8, 8, 12, 12, 1}, // wider than the automatic choice takes
	} {
		p := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: c.pad, PadW: c.pad}
		x, w, bias := randTensor(rng, c.n, c.c, c.h, c.w), randTensor(rng, c.f, c.c, 3, 3), randTensor(rng, c.f)
		oh, ow := p.OutSize(c.h, c.w)
		dy := randTensor(rng, c.n, c.f, oh, ow)
		for _, vector := range []bool{false, true} {
			var got [2][5]*tensor.Tensor // by layout: y with bias, y without, dx, dw, db
			for i, layout := range []winoLayout{winoPlanes, winoChannelsLast} {
				be := New(1)
				be.SetConvAlgorithm(ConvWinograd)
				be.winoLayout = layout
				be.winoTile = 2
				if !vector {
					be.vec = vecOps{}
				}
				y, y0, dx := tensor.New(c.n, c.f, oh, ow), tensor.New(c.n, c.f, oh, ow), tensor.New(x.Shape...)
				dw, db := tensor.New(w.Shape...), tensor.New(c.f)
				be.Conv2d(x, w, bias, y, p)
				be.Conv2d(x, w, nil, y0, p)
				be.Conv2dBackward(x, w, dy, dx, dw, db, p)
				got[i] = [5]*tensor.Tensor{y, y0, dx, dw, db}
				be.Close()
			}
			for j, name := range []string{"y", "y without bias", "dx", "dw", "db"} {
				for i, v := range got[0][j].Data {
					if math.Float32bits(got[1][j].Data[i]) != math.Float32bits(v) {
						t.Fatalf("case %+v, vector kernels %v: %s[%d] = %v channels innermost, %v in planes", c, vector, name, i, got[1][j].Data[i], v)
					}
				}
			}
		}
	}
}

// TestWinogradChoice: the automatic choice takes Winograd for 3×3 stride-1
// layers with enough channels only; ConvIm2col turns it off.
func TestWinogradChoice(t *testing.T) {
	be := New(1)
	defer be.Close()
	p3 := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	for _, c := range []struct {
		c, f int
		p    tensor.ConvParams
		algo ConvAlgorithm
		want bool
		hw   int // the map's height and width, 8 when 0
	}{
		{64, 128, p3, ConvAuto, true, 0},
		{3, 64, p3, ConvAuto, false, 0},          // a first layer: too few channels
		{64, 32, p3, ConvAuto, be.vec.vector, 0}, // thin layers: Winograd with the vector transforms
		{32, 64, p3, ConvAuto, be.vec.vector, 0},
		{16, 16, p3, ConvAuto, be.vec.vector, 0},
		{8, 64, p3, ConvAuto, false, 0},
		{64, 128, p3, ConvIm2col, false, 0},
		{3, 64, p3, ConvWinograd, true, 0},
		{64, 64, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}, ConvWinograd, false, 0},
		{64, 64, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}, ConvWinograd, false, 0},
		{64, 64, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 3, PadW: 3}, ConvWinograd, false, 0},
		// Maps below four tiles an image stay im2col unless forced.
		{128, 128, p3, ConvAuto, true, 4},
		{128, 128, p3, ConvAuto, true, 3},
		{256, 256, p3, ConvAuto, false, 2},
		{256, 256, p3, ConvWinograd, true, 2},
	} {
		hw := cmp.Or(c.hw, 8)
		t.Run(fmt.Sprintf("%d-%d-%+v-%d-%d", c.c, c.f, c.p, c.algo, hw), func(t *testing.T) {
			be.SetConvAlgorithm(c.algo)
			x, w := tensor.New(1, c.c, hw, hw), tensor.New(c.f, c.c, c.p.KernelH, c.p.KernelW)
			if got := be.useWinograd(geom(x, w, c.p), c.p); got != c.want {
				t.Errorf("Winograd chosen: %v, want %v", got, c.want)
			}
		})
	} // Without the vector transforms, thin layers stay im2col.
	loops := NewPureGo(1)
	defer loops.Close()
	x, w := tensor.New(1, 32, 8, 8), tensor.New(64, 32, 3, 3)
	if loops.useWinograd(geom(x, w, p3), p3) {
		t.Errorf("32 → 64 channels with the transforms' loops: Winograd chosen, want im2col")
	}
}

// TestNameSaysConvAlgorithm: the backend's description, which the trainer
// prints first, names the convolution algorithm in use.
func TestNameSaysConvAlgorithm(t *testing.T) {
	be := New(2)
	defer be.Close()
	wino := "Winograd F(2×2, 3×3)" // the loops'
	if be.vec.vector {
		wino += " (frozen layers F(4×4, 3×3))"
	}
	for _, c := range []struct {
		algo ConvAlgorithm
		want string
	}{
		{ConvAuto, fmt.Sprintf(", %s for 3×3 layers of %d+ channels and 4+ tiles, dense products for maps within a kernel, element-wise ", wino, be.winoMinChannels())},
		{ConvIm2col, ", im2col convolutions, element-wise "},
		{ConvWinograd, ", " + wino + " for every 3×3 layer, element-wise "},
	} {
		be.SetConvAlgorithm(c.algo)
		if got := be.Name(); !strings.HasPrefix(got, "cpu ") || !strings.Contains(got, c.want) || !strings.HasSuffix(got, ", 2 threads") {
			t.Errorf("algorithm %d: %q, want cpu KERNEL%sKERNELS, 2 threads", c.algo, got, c.want)
		}
	}
}

// TestNameSaysElementwiseKernels: the description names the element-wise
// kernels in use: the AVX-512 ones with the AVX-512 GEMM kernel only,
// whether New picks it or the override names it, and none with the Go
// kernel.
func TestNameSaysElementwiseKernels(t *testing.T) {
	cases := []struct {
		kernel, want string
	}{
		{"", vecOps{vector: hasVectorOps(), wide: hasWideOps() && gemm.Kernels()[0] == "avx512"}.name()},
		{"go", "go loops"},
	}
	if hasWideOps() {
		cases = append(cases, struct{ kernel, want string }{"avx512", "avx2+avx512"}, struct{ kernel, want string }{"avx2-fma", "avx2"})
	}
	for _, c := range cases {
		be, err := NewWithKernel(1, c.kernel)
		if err != nil {
			t.Fatal(err)
		}
		if got := be.Name(); !strings.HasSuffix(got, ", element-wise "+c.want+", 1 thread") {
			t.Errorf("GORUN_CPU_KERNEL=%q: %q, want element-wise %s", c.kernel, got, c.want)
		}
		be.Close()
	}
}

// TestWinogradWeightsForms checks the weight transform by planes (with
// the vector kernels) against the loop kernel by kernel, bit for bit,
// forward and flipped, for shapes of one block of kernels and of several
// with a ragged last one.
func TestWinogradWeightsForms(t *testing.T) {
	if !hasVectorOps() {
		t.Skip("no vector kernels on this build or processor (AVX2 missing or purego): the loop is all there is")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range []struct{ f, c int }{{1, 1}, {3, 5}, {37, 29}, {64, 72}} {
		w := make([]float32, s.f*s.c*9)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		for _, flipped := range []bool{false, true} {
			size := 16 * winoStride(s.f*s.c)
			want, got := make([]float32, size), make([]float32, size)
			var work winoRows
			winogradWeights(vecOps{}, want, w, s.f, s.c, flipped, &work)
			winogradWeights(vecOps{vector: true}, got, w, s.f, s.c, flipped, &work)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d×%d kernels, flipped %v: u[%d] = %v by planes, %v kernel by kernel", s.f, s.c, flipped, i, got[i], want[i])
				}
			}
		}
	}
}

// TestChannelsLastChoice: the transforms run channels innermost on
// outputs up to winoLastMaxTileCols tiles wide, with the vector kernels
// only, or up to winoLastMaxTileColsWide for layers of at most
// winoLastMaxKernelsWide kernels with the AVX-512 ones where the weights
// are not kept, unless a layout is forced.
func TestChannelsLastChoice(t *testing.T) {
	be := New(1)
	defer be.Close()
	const small = 64 * 64 // kernels (F·C)
	for _, c := range []struct {
		oh, ow             int
		kernels            int
		vector, wide, kept bool
		layout             winoLayout
		want               bool
	}{
		{4, 4, small, true, false, false, winoLayoutAuto, true},
		{3, 3, small, true, false, false, winoLayoutAuto, true},
		{8, 4, small, true, false, false, winoLayoutAuto, true}, // tall: the width decides
		{5, 5, small, true, false, false, winoLayoutAuto, false},
		{8, 8, small, true, false, false, winoLayoutAuto, false},
		{4, 4, small, false, false, false, winoLayoutAuto, false},
		{4, 4, small, true, false, false, winoPlanes, false},
		{56, 56, small, false, false, false, winoChannelsLast, true},
		{8, 8, small, true, true, false, winoLayoutAuto, true},        // AVX-512, training: ResNet-18's layer1
		{8, 8, 128 * 256, true, true, false, winoLayoutAuto, true},    // CIFARNet's conv3
		{14, 14, 256 * 256, true, true, false, winoLayoutAuto, true},  // 7 tiles wide: ResNet-50's layer3
		{7, 7, 512 * 512, true, true, false, winoLayoutAuto, false},   // too many kernels: ResNet-50's layer4
		{8, 8, 256*256 + 1, true, true, false, winoLayoutAuto, false}, // just over
		{16, 16, small, true, true, false, winoLayoutAuto, false},     // 8 tiles wide
		{8, 8, small, true, true, true, winoLayoutAuto, false},        // kept weights: the narrower rule
		{4, 4, 512 * 512, true, true, true, winoLayoutAuto, true},     // ... which ignores the kernel count
		{8, 8, small, false, true, false, winoLayoutAuto, false},      // no vector kernels
		{16, 16, small, true, true, false, winoPlanes, false},         // forced
	} {
		be.vec.vector, be.vec.wide, be.winoLayout = c.vector, c.wide, c.layout
		if got := be.channelsLast(winoTiling(c.oh, c.ow), c.kernels, c.kept); got != c.want {
			t.Errorf("%+v: %v", c, got)
		}
	}
}

// TestTransformWeightsThreads: the weight transform with its blocks of
// kernels spread over two threads (transformWeights) gives the bits of
// the one-goroutine transform, forward and flipped, and for 4×4 tiles,
// for kernel counts of one block, a few and a partial last one.
func TestTransformWeightsThreads(t *testing.T) {
	if !hasVectorOps() {
		t.Skip("no vector kernels on this build or processor (AVX2 missing or purego): the transform runs on the calling goroutine")
	}
	be := New(2)
	defer be.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range []struct{ f, c int }{{3, 5}, {64, 64}, {64, 72}, {256, 256}} {
		w := tensor.New(s.f, s.c, 3, 3)
		for i := range w.Data {
			w.Data[i] = float32(rng.NormFloat64())
		}
		for _, form := range []struct {
			tile    int
			flipped bool
		}{{2, false}, {2, true}, {4, false}} {
			want := make([]float32, winoElems(form.tile)*winoStride(s.f*s.c))
			var work winoRows
			if form.tile == 4 {
				winograd4Weights(be.vec, want, w.Data, s.f, s.c, &work, 0, ceilDiv(s.f*s.c, winoWeightBlock))
			} else {
				winogradWeights(be.vec, want, w.Data, s.f, s.c, form.flipped, &work)
			}
			u := make([]float32, len(want))
			be.transformWeights(u, w, s.f, s.c, form.tile, form.flipped)
			for i, v := range want {
				if math.Float32bits(u[i]) != math.Float32bits(v) {
					t.Fatalf("%d×%d kernels, %+v: u[%d] = %v on two threads, %v on one", s.f, s.c, form, i, u[i], v)
				}
			}
		}
	}
}
