package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

func randTensor(rng *rand.Rand, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64())
	}
	return t
}

// referenceMaxPool is max pooling written directly from the definition,
// with PyTorch's tie and NaN rules, returning the output and the input
// gradient for dy.
func referenceMaxPool(x, dy *tensor.Tensor, p tensor.PoolParams) (y, dx []float32) {
	n, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	oh, ow := p.OutSize(h, w)
	y = make([]float32, n*c*oh*ow)
	dx = make([]float32, len(x.Data))
	for pl := range n * c {
		for i := range oh {
			for j := range ow {
				best, at := float32(math.Inf(-1)), -1
				for r := i*p.StrideH - p.PadH; r < i*p.StrideH-p.PadH+p.KernelH; r++ {
					for s := j*p.StrideW - p.PadW; s < j*p.StrideW-p.PadW+p.KernelW; s++ {
						if r < 0 || r >= h || s < 0 || s >= w {
							continue
						}
						v := x.Data[(pl*h+r)*w+s]
						if at < 0 || v > best || v != v {
							best, at = v, (pl*h+r)*w+s
						}
					}
				}
				y[(pl*oh+i)*ow+j] = best
				dx[at] += dy.Data[(pl*oh+i)*ow+j]
			}
		}
	}
	return y, dx
}

// TestMaxPool checks the 2×2 fast path, the 3×3 stride-2 planes, the
// 3-wide stride-2 vector rows and the general loops against the
// definition, bit for bit, with ties (of −0 and +0 too), NaNs and −∞
// (a plane of it too), on 1 and 3 threads.
func TestMaxPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	params := []tensor.PoolParams{
		{KernelH: 2, KernelW: 2, StrideH: 2, StrideW: 2},
		{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
		{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2},
		{KernelH: 2, KernelW: 2, StrideH: 1, StrideW: 1},
		{KernelH: 3, KernelW: 2, StrideH: 1, StrideW: 3, PadH: 1},
	}
	for _, threads := range []int{1, 3} {
		be := New(threads)
		for _, p := range params {
			// Square sides 12–17: padded vector rows; 26, 40, 70: vector
			// rows, with an overlapping last block. The 3×3, stride-2
			// windows take whole planes: every side forward, the
			// smallest and uneven ones too, and rows up to 32 outputs
			// backward (70×70 and 66×70: the rows).
			for _, side := range [][2]int{{7, 7}, {8, 8}, {12, 12}, {16, 16}, {17, 17}, {26, 26}, {40, 40}, {70, 70}, {66, 70}, {1, 1}, {2, 3}, {3, 2}, {4, 9}, {9, 4}, {5, 33}, {33, 6}} {
				h, w := side[0], side[1]
				if h < p.KernelH-2*p.PadH || w < p.KernelW-2*p.PadW {
					continue // no output
				}
				x := randTensor(rng, 5, 3, h, w)
				for i := range x.Data {
					switch rng.IntN(12) {
					case 0:
						x.Data[i] = 1 // ties
					case 1:
						x.Data[i] = math.Float32frombits(0x7fc00000 | uint32(i)) // NaNs told apart: the last one wins
					case 2:
						x.Data[i] = float32(math.Copysign(0, -1)) // ties of −0 and +0
					case 3:
						x.Data[i] = 0
					case 4:
						x.Data[i] = float32(math.Inf(-1))
					}
				}
				// A plane of −∞ only: every window's maximum is its
				// first element.
				for i := range h * w {
					x.Data[h*w+i] = float32(math.Inf(-1))
				}
				oh, ow := p.OutSize(h, w)
				y := tensor.New(5, 3, oh, ow)
				dy := randTensor(rng, 5, 3, oh, ow)
				dx := tensor.New(x.Shape...)
				for i := range dx.Data {
					dx.Data[i] = 42 // must be overwritten
				}
				be.MaxPool2d(x, y, p)
				be.MaxPool2dBackward(x, dy, dx, p)
				wantY, wantDX := referenceMaxPool(x, dy, p)
				same := func(a, b []float32) bool { // bit for bit: −0 and +0, and which NaN
					return slices.EqualFunc(a, b, func(u, v float32) bool { return math.Float32bits(u) == math.Float32bits(v) })
				}
				if !same(y.Data, wantY) || !same(dx.Data, wantDX) {
					t.Fatalf("threads %d, %+v, %dx%d: differs from the definition", threads, p, h, w)
				}
			}
		}
		be.Close()
	}
}

// TestThreadCountInvariance runs the element-wise operations and
// optimizer updates on 1 and 3 threads and requires identical bits.
func TestThreadCountInvariance(t *testing.T) {
	const n = 200003 // several chunks, uneven
	run := func(threads int) [][]float32 {
		be := New(threads)
		defer be.Close()
		rng := rand.New(rand.NewPCG(3, 4))
		x, y, g := randTensor(rng, n), tensor.New(n), randTensor(rng, n)
		var out [][]float32
		keep := func(ts ...*tensor.Tensor) {
			for _, t := range ts {
				out = append(out, slices.Clone(t.Data))
			}
		}
		be.ReLU(x, y)
		dx := tensor.New(n)
		be.ReLUBackward(y, g, dx)
		keep(y, dx)
		mask, z := tensor.New(n), tensor.New(n)
		be.Dropout(x, z, mask, 0.3, 99)
		keep(z, mask)
		be.Mul(x, g, z)
		keep(z)
		be.Add(x, g, z)
		keep(z)
		p, buf := x.Clone(), tensor.New(n)
		be.SGDStep(p, g, buf, tensor.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01}, true)
		be.SGDStep(p, g, buf, tensor.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: 0.01}, false)
		keep(p, buf)
		m, v := tensor.New(n), tensor.New(n)
		be.AdamStep(p, g, m, v, tensor.AdamOptions{LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, 1)
		keep(p, m, v)
		sq, acc := tensor.New(n), tensor.New(n)
		be.AdadeltaStep(p, g, sq, acc, tensor.AdadeltaOptions{LR: 1, Rho: 0.9, Eps: 1e-6})
		keep(p, sq, acc)
		return out
	}
	one, three := run(1), run(3)
	for i := range one {
		for k := range one[i] {
			if math.Float32bits(one[i][k]) != math.Float32bits(three[i][k]) {
				t.Fatalf("result %d differs between 1 and 3 threads at %d: %v and %v", i, k, one[i][k], three[i][k])
			}
		}
	}
	// Dropout drops about p of the elements.
	dropped := 0
	for _, m := range one[3] {
		if m == 0 {
			dropped++
		}
	}
	if f := float64(dropped) / n; math.Abs(f-0.3) > 0.01 {
		t.Fatalf("dropout dropped %.3f of the elements, want 0.3", f)
	}
}

// referenceConv computes a convolution and its gradients from the
// definition in float64.
func referenceConv(x, w, bias, dy *tensor.Tensor, p tensor.ConvParams) (y, dx, dw, db []float64) {
	n, c, h, wd := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	f := w.Shape[0]
	oh, ow := p.OutSize(h, wd)
	y, dx, dw, db = make([]float64, n*f*oh*ow), make([]float64, len(x.Data)), make([]float64, len(w.Data)), make([]float64, f)
	for img := range n {
		for o := range f {
			for i := range oh {
				for j := range ow {
					out := ((img*f+o)*oh+i)*ow + j
					s := float64(bias.Data[o])
					g := float64(dy.Data[out])
					db[o] += g
					for ch := range c {
						for kh := range p.KernelH {
							for kw := range p.KernelW {
								r, q := i*p.StrideH-p.PadH+kh, j*p.StrideW-p.PadW+kw
								if r < 0 || r >= h || q < 0 || q >= wd {
									continue
								}
								xi := ((img*c+ch)*h+r)*wd + q
								wi := ((o*c+ch)*p.KernelH+kh)*p.KernelW + kw
								s += float64(x.Data[xi]) * float64(w.Data[wi])
								dx[xi] += g * float64(w.Data[wi])
								dw[wi] += g * float64(x.Data[xi])
							}
						}
					}
					y[out] = s
				}
			}
		}
	}
	return y, dx, dw, db
}

// TestConvolution checks the convolution against its definition for
// shapes that exercise one image per GEMM, groups of images per GEMM
// (small outputs) with a ragged last group, 1×1 kernels and strides, on
// 1 and 2 threads.
func TestConvolution(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cases := []struct {
		n, c, f, hw int
		p           tensor.ConvParams
	}{
		{7, 3, 5, 8, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}},    // 64 outputs: grouped
		{5, 4, 6, 16, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}},   // 256: pairs
		{3, 2, 4, 28, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1}},                     // one per GEMM
		{6, 8, 3, 4, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}},                      // pointwise, grouped
		{2, 8, 3, 20, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}},                     // pointwise, direct
		{4, 3, 4, 15, tensor.ConvParams{KernelH: 7, KernelW: 7, StrideH: 2, StrideW: 2, PadH: 3, PadW: 3}},   // strided
		{1, 32, 64, 32, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}}, // one image: the GEMM split over threads
		{3, 2, 3, 9, tensor.ConvParams{KernelH: 3, KernelW: 2, StrideH: 2, StrideW: 1, PadH: 2, PadW: 1}},    // uneven kernel, wide padding
		{2, 3, 4, 7, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 2, StrideW: 2}},                      // a downsample
		{2, 5, 3, 10, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 2, StrideW: 3}},                     // subsampled unevenly
		{2, 6, 5, 40, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 2, StrideW: 2}},                     // subsampled, one image to a GEMM
		{2, 2, 3, 3, tensor.ConvParams{KernelH: 5, KernelW: 5, StrideH: 3, StrideW: 3, PadH: 2, PadW: 2}},    // windows over both edges
		// Column matrices in blocks: 360 rows (two blocks of the GEMM's
		// depth) by 1,296 columns (two blocks) from an odd-width image,
		// and 270 rows by three images' columns.
		{1, 40, 4, 71, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
		{3, 30, 4, 10, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}},
		// Stride 2 with 32+ channels: groups of images, the last group
		// smaller; odd widths unpadded; kernels of 4, 5 and 3×2 with
		// uneven padding.
		{5, 32, 6, 14, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
		{3, 33, 5, 15, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2}},
		{2, 32, 4, 12, tensor.ConvParams{KernelH: 5, KernelW: 5, StrideH: 2, StrideW: 2, PadH: 2, PadW: 2}},
		{4, 36, 3, 9, tensor.ConvParams{KernelH: 4, KernelW: 4, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
		{3, 32, 4, 8, tensor.ConvParams{KernelH: 3, KernelW: 2, StrideH: 2, StrideW: 2, PadH: 1}},
		{1, 48, 7, 57, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
		// Taps that meet only padding (taps.go): 1×1 maps, where a 3×3
		// kernel's centre alone is live (ResNet-18's layer4 on CIFAR-10,
		// Winograd's channels), a stride-2 kernel with four live taps, a
		// 5×5 kernel on a 2×2 map with three rows and columns live, and
		// 2×2 maps, whose 3×3 kernels keep every tap.
		{5, 16, 16, 1, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}},
		{1, 20, 24, 1, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}},
		{4, 6, 5, 2, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}},
		{3, 4, 3, 2, tensor.ConvParams{KernelH: 5, KernelW: 5, StrideH: 1, StrideW: 1, PadH: 2, PadW: 2}},
		{6, 16, 16, 2, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}},
	}
	for _, threads := range []int{1, 2} {
		be := New(threads)
		for _, c := range cases {
			x := randTensor(rng, c.n, c.c, c.hw, c.hw)
			w := randTensor(rng, c.f, c.c, c.p.KernelH, c.p.KernelW)
			bias := randTensor(rng, c.f)
			oh, ow := c.p.OutSize(c.hw, c.hw)
			y := tensor.New(c.n, c.f, oh, ow)
			dy := randTensor(rng, y.Shape...)
			dx, dw, db := tensor.New(x.Shape...), tensor.New(w.Shape...), tensor.New(c.f)
			be.Conv2d(x, w, bias, y, c.p)
			be.Conv2dBackward(x, w, dy, dx, dw, db, c.p)
			wy, wdx, wdw, wdb := referenceConv(x, w, bias, dy, c.p)
			for _, r := range []struct {
				name string
				got  []float32
				want []float64
			}{{"y", y.Data, wy}, {"dx", dx.Data, wdx}, {"dw", dw.Data, wdw}, {"db", db.Data, wdb}} {
				for i, v := range r.want {
					if math.Abs(float64(r.got[i])-v) > 1e-4*(1+math.Abs(v)) {
						t.Fatalf("threads %d, case %+v: %s[%d] = %v, want %v", threads, c, r.name, i, r.got[i], v)
					}
				}
			}
			// Without a bias gradient (a layer with no bias): the same
			// dx and dw, bit for bit.
			dx2, dw2 := tensor.New(x.Shape...), tensor.New(w.Shape...)
			be.Conv2dBackward(x, w, dy, dx2, dw2, nil, c.p)
			if !slices.Equal(dx2.Data, dx.Data) || !slices.Equal(dw2.Data, dw.Data) {
				t.Fatalf("threads %d, case %+v: dx or dw differ without the bias gradient", threads, c)
			}
			checkSplitBackward(t, be, x, w, dy, dx, dw, db, c.p, fmt.Sprintf("threads %d, case %+v", threads, c))
			if c.n >= threads {
				checkImagesAlone(t, threads, ConvAuto, x, w, bias, dy, y, dx, dw, c.p, fmt.Sprintf("threads %d, case %+v", threads, c))
			}
		}
		be.Close()
	}
}

// checkImagesAlone runs each image of a batch through the convolution
// alone, on a backend of threads+1 threads running algorithm algo, and
// fails unless its output and input gradient equal, bit for bit, the
// batch's y and dx, and for a batch of one image its weight gradient dw:
// a batch of at least as many images as threads runs each chunk's
// products on one thread, a block of the column matrix at a time (blocks
// split at multiples of the GEMM's depth), several small images to a
// product; a batch of fewer runs each image's whole matrices, every
// product split over the threads.
func checkImagesAlone(t *testing.T, threads int, algo ConvAlgorithm, x, w, bias, dy, y, dx, dw *tensor.Tensor, p tensor.ConvParams, label string) {
	t.Helper()
	be := New(threads + 1)
	defer be.Close()
	be.SetConvAlgorithm(algo)
	n := x.Shape[0]
	for k := range n {
		one := func(batch *tensor.Tensor) *tensor.Tensor {
			per := len(batch.Data) / n
			shape := append([]int{1}, batch.Shape[1:]...)
			out, err := tensor.FromData(batch.Data[k*per:(k+1)*per], shape...)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		xk, dyk := one(x), one(dy)
		yk, dxk, dwk := tensor.New(one(y).Shape...), tensor.New(xk.Shape...), tensor.New(w.Shape...)
		be.Conv2d(xk, w, bias, yk, p)
		be.Conv2dBackward(xk, w, dyk, dxk, dwk, nil, p)
		results := []struct {
			name      string
			got, want []float32
		}{{"y", yk.Data, one(y).Data}, {"dx", dxk.Data, one(dx).Data}}
		if n == 1 {
			results = append(results, struct {
				name      string
				got, want []float32
			}{"dw", dwk.Data, dw.Data})
		}
		for _, r := range results {
			for i := range r.want {
				if math.Float32bits(r.got[i]) != math.Float32bits(r.want[i]) {
					t.Fatalf("%s: image %d alone: %s[%d] = %v, in the batch %v", label, k, r.name, i, r.got[i], r.want[i])
				}
			}
		}
	}
}

// checkSplitBackward computes a convolution's input gradient, then its
// weight and bias gradients, then the bias gradient alone, each in its own
// Conv2dBackward call (the halves of a pipeline's split backward), and
// fails unless each equals, bit for bit, dx, dw and db computed together.
func checkSplitBackward(t *testing.T, be *Backend, x, w, dy, dx, dw, db *tensor.Tensor, p tensor.ConvParams, label string) {
	t.Helper()
	sdx, sdw, sdb, bdb := tensor.New(x.Shape...), tensor.New(w.Shape...), tensor.New(db.Shape...), tensor.New(db.Shape...)
	be.Conv2dBackward(x, w, dy, sdx, nil, nil, p)
	be.Conv2dBackward(x, w, dy, nil, sdw, sdb, p)
	be.Conv2dBackward(x, w, dy, nil, nil, bdb, p)
	for _, r := range []struct {
		name      string
		got, want []float32
	}{{"dx alone", sdx.Data, dx.Data}, {"dw without dx", sdw.Data, dw.Data}, {"db without dx", sdb.Data, db.Data}, {"db alone", bdb.Data, db.Data}} {
		for i := range r.want {
			if math.Float32bits(r.got[i]) != math.Float32bits(r.want[i]) {
				t.Fatalf("%s: %s[%d] = %v, computed together %v", label, r.name, i, r.got[i], r.want[i])
			}
		}
	}
}

// TestNewWithKernel: the GEMM kernel a user names is the one the backend
// runs and describes; "go" also turns the vector element-wise kernels
// off; an unknown name is an error.
func TestNewWithKernel(t *testing.T) {
	for _, name := range gemm.Kernels() {
		b, err := NewWithKernel(1, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.HasPrefix(b.Name(), "cpu "+name) || b.vec.vector != (name != "go" && hasVectorOps()) {
			t.Errorf("%s: %q, vector element-wise kernels %v", name, b.Name(), b.vec.vector)
		}
		b.Close()
	}
	def := New(1)
	defer def.Close()
	b, err := NewWithKernel(1, "")
	if err != nil || b.Name() != def.Name() {
		t.Fatalf("no override: %v, %v", b, err)
	}
	b.Close()
	if _, err := NewWithKernel(1, "avx1024"); err == nil || !strings.Contains(err.Error(), "avx1024") {
		t.Fatalf("avx1024: %v", err)
	}
}

// TestNewFromEnv: GORUN_CPU_KERNEL picks the kernel, unset is New's
// choice, and one this CPU cannot run is an error naming the variable
// and the value.
func TestNewFromEnv(t *testing.T) {
	t.Setenv("GORUN_CPU_KERNEL", "go")
	b, err := NewFromEnv(1)
	if err != nil || !strings.HasPrefix(b.Name(), "cpu go ") {
		t.Fatalf("go: %v, %v", b, err)
	}
	b.Close()
	t.Setenv("GORUN_CPU_KERNEL", "")
	def := New(1)
	defer def.Close()
	if b, err = NewFromEnv(1); err != nil || b.Name() != def.Name() {
		t.Fatalf("unset: %v, %v", b, err)
	}
	b.Close()
	t.Setenv("GORUN_CPU_KERNEL", "avx1024")
	if _, err := NewFromEnv(1); err == nil || !strings.Contains(err.Error(), "GORUN_CPU_KERNEL") || !strings.Contains(err.Error(), "avx1024") {
		t.Fatalf("avx1024: %v", err)
	}
}

// TestAddRowSums: rows summed four at a time give, bit for bit, what a
// plain loop over each row gives, for 0 to 9 rows, rows of 0 to 37
// values, stride past the row, added to what sums held.
func TestAddRowSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for rows := range 10 {
		for _, n := range []int{0, 1, 5, 37} {
			stride := n + 3
			m := make([]float32, rows*stride)
			for i := range m {
				m[i] = float32(rng.NormFloat64()) * float32(math.Pow(10, float64(rng.IntN(7)-3)))
			}
			got, want := make([]float32, rows), make([]float32, rows)
			for r := range rows {
				got[r] = float32(r) / 3
				want[r] = got[r]
				var sum float32
				for _, v := range m[r*stride : r*stride+n] {
					sum += v
				}
				want[r] += sum
			}
			addRowSums(got, m, n, stride)
			for r := range rows {
				if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
					t.Fatalf("%d rows of %d: row %d sums to %v, a plain loop to %v", rows, n, r, got[r], want[r])
				}
			}
		}
	}
}

// TestAddBiasKeepsBits: the bias added with the row kernel (x·1 + v) is
// x + v bit for bit, signed zeros, infinities and subnormals included,
// with the vector kernels and without.
func TestAddBiasKeepsBits(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), 1e-40, -3e-39, 3.4e38, 1.5}
	for _, vec := range []bool{true, false} {
		be := New(1)
		if !vec {
			be.vec = vecOps{}
		}
		hw := 37
		y := make([]float32, len(special)*hw)
		want := make([]float32, len(y))
		bias := tensor.New(len(special))
		for f, v := range special {
			bias.Data[f] = v
			for j := range hw {
				x := special[(f+j)%len(special)]
				y[f*hw+j] = x
				want[f*hw+j] = x + v
			}
		}
		task := convTask{b: be, bias: bias}
		task.addBias(y, hw)
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(y[i])) && math.IsNaN(float64(want[i]))) {
				t.Fatalf("vector %v: value %d is %v, x + v is %v", vec, i, y[i], want[i])
			}
		}
		be.Close()
	}
}

// referenceAvgPool averages each output's window of x in row-major order
// in float32, dividing by the window's size (the padding counted, for
// fixed windows, as count_include_pad does), and spreads dy back.
func referenceAvgPool(x, dy *tensor.Tensor, oh, ow int, win func(i, j int) (h0, h1, w0, w1, div int)) (y, dx []float32) {
	n, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	y, dx = make([]float32, n*c*oh*ow), make([]float32, len(x.Data))
	for pl := range n * c {
		for i := range oh {
			for j := range ow {
				h0, h1, w0, w1, div := win(i, j)
				var s float32
				for r := h0; r < h1; r++ {
					for q := w0; q < w1; q++ {
						s += x.Data[(pl*h+r)*w+q]
					}
				}
				out := (pl*oh+i)*ow + j
				y[out] = s / float32(div)
				g := dy.Data[out] / float32(div)
				for r := h0; r < h1; r++ {
					for q := w0; q < w1; q++ {
						dx[(pl*h+r)*w+q] += g
					}
				}
			}
		}
	}
	return y, dx
}

// TestAvgPool checks average pooling, fixed and adaptive, against the
// definition bit for bit — the global pools (one output a plane: the
// ResNets' head, a path of its own) among them, with −0 among the
// values and the gradients.
func TestAvgPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	be := New(1)
	defer be.Close()
	for _, c := range []struct {
		name       string
		h, w       int
		oh, ow     int
		fixed      bool
		k, st, pad int
	}{
		{"adaptive 1×1 of 7×7", 7, 7, 1, 1, false, 0, 0, 0},
		{"adaptive 1×1 of 1×1", 1, 1, 1, 1, false, 0, 0, 0},
		{"adaptive 1×1 of 3×5", 3, 5, 1, 1, false, 0, 0, 0},
		{"adaptive 3×2 of 7×5", 7, 5, 3, 2, false, 0, 0, 0},
		{"fixed 4×4 over 4×4", 4, 4, 1, 1, true, 4, 4, 0},
		{"fixed 3×3 stride 2 pad 1 over 2×2", 2, 2, 1, 1, true, 3, 2, 1},
		{"fixed 3×3 stride 2 pad 1 over 6×6", 6, 6, 3, 3, true, 3, 2, 1},
	} {
		x := randTensor(rng, 3, 5, c.h, c.w)
		for i := range x.Data {
			if rng.IntN(5) == 0 {
				x.Data[i] = float32(math.Copysign(0, -1))
			}
		}
		dy := randTensor(rng, 3, 5, c.oh, c.ow)
		for i := range dy.Data {
			if rng.IntN(5) == 0 {
				dy.Data[i] = float32(math.Copysign(0, -1))
			}
		}
		y, dx := tensor.New(3, 5, c.oh, c.ow), tensor.New(x.Shape...)
		var win func(i, j int) (int, int, int, int, int)
		if c.fixed {
			p := tensor.PoolParams{KernelH: c.k, KernelW: c.k, StrideH: c.st, StrideW: c.st, PadH: c.pad, PadW: c.pad}
			be.AvgPool2d(x, y, p)
			be.AvgPool2dBackward(dy, dx, p)
			win = func(i, j int) (int, int, int, int, int) {
				h0, h1 := i*c.st-c.pad, min(i*c.st-c.pad+c.k, c.h+c.pad)
				w0, w1 := j*c.st-c.pad, min(j*c.st-c.pad+c.k, c.w+c.pad)
				return max(h0, 0), min(h1, c.h), max(w0, 0), min(w1, c.w), (h1 - h0) * (w1 - w0)
			}
		} else {
			be.AdaptiveAvgPool2d(x, y)
			be.AdaptiveAvgPool2dBackward(dy, dx)
			win = func(i, j int) (int, int, int, int, int) {
				h0, h1 := i*c.h/c.oh, ((i+1)*c.h+c.oh-1)/c.oh
				w0, w1 := j*c.w/c.ow, ((j+1)*c.w+c.ow-1)/c.ow
				return h0, h1, w0, w1, (h1 - h0) * (w1 - w0)
			}
		}
		wantY, wantDX := referenceAvgPool(x, dy, c.oh, c.ow, win)
		for _, r := range []struct {
			name      string
			got, want []float32
		}{{"y", y.Data, wantY}, {"dx", dx.Data, wantDX}} {
			for i, v := range r.want {
				if math.Float32bits(r.got[i]) != math.Float32bits(v) {
					t.Fatalf("%s: %s[%d] = %v, want %v", c.name, r.name, i, r.got[i], v)
				}
			}
		}
	}
}
