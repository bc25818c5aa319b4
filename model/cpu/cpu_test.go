package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

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

// TestMaxPool checks the 2×2 fast path and the general loops against the
// definition, with ties and NaNs, on 1 and 3 threads.
func TestMaxPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	params := []tensor.PoolParams{
		{KernelH: 2, KernelW: 2, StrideH: 2, StrideW: 2},
		{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1},
		{KernelH: 2, KernelW: 2, StrideH: 1, StrideW: 1},
	}
	for _, threads := range []int{1, 3} {
		be := New(threads)
		for _, p := range params {
			for _, hw := range []int{7, 8, 26} {
				x := randTensor(rng, 5, 3, hw, hw)
				for i := range x.Data {
					switch rng.IntN(10) {
					case 0:
						x.Data[i] = 1 // ties
					case 1:
						x.Data[i] = float32(math.NaN())
					}
				}
				oh, ow := p.OutSize(hw, hw)
				y := tensor.New(5, 3, oh, ow)
				dy := randTensor(rng, 5, 3, oh, ow)
				dx := tensor.New(x.Shape...)
				for i := range dx.Data {
					dx.Data[i] = 42 // must be overwritten
				}
				be.MaxPool2d(x, y, p)
				be.MaxPool2dBackward(x, dy, dx, p)
				wantY, wantDX := referenceMaxPool(x, dy, p)
				same := func(a, b []float32) bool {
					return slices.EqualFunc(a, b, func(u, v float32) bool { return u == v || (u != u && v != v) })
				}
				if !same(y.Data, wantY) || !same(dx.Data, wantDX) {
					t.Fatalf("threads %d, %+v, %dx%d: differs from the definition", threads, p, hw, hw)
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
