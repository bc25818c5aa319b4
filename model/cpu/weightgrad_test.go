package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/gemm"
	"github.com/gorun/gorun/model/tensor"
)

// TestWeightGradTransposedSameBits: a 1×1 kernel's weight gradient,
// summed as dWᵀ += x · dyᵀ where it has several times more inputs than
// outputs (transposedWeightGrad) and as dW += dy · xᵀ elsewhere, has the
// bits of dW += dy_g · x_gᵀ group by group (one image, or several side
// by side on small maps), each chunk of the batch summed alone and the
// chunks added in order — on one and two threads (one image's product
// split over both), at stride 1 and subsampled at stride 2, on both
// sides of the rule's bounds, with the groups' column matrix in one
// block of rows and in two, in a backend's second call as in its first.
func TestWeightGradTransposedSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	one := func(stride int) tensor.ConvParams {
		return tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: stride, StrideW: stride}
	}
	// Only 1×1 kernels: a 3×3 one with as many inputs per output as the
	// first case below keeps its usual product.
	three := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	if x, w := tensor.New(1, 48, 8, 8), tensor.New(12, 48, 3, 3); transposedWeightGrad(geom(x, w, three), three) {
		t.Fatal("a 3×3 kernel's weight gradient would be summed transposed")
	}
	for _, c := range []struct {
		name       string
		n, c, f    int
		hw         int
		p          tensor.ConvParams
		transposed bool
	}{
		{"four times the inputs", 5, 48, 12, 24, one(1), true},
		{"one image, its product split over the threads", 1, 48, 12, 24, one(1), true},
		{"fewer inputs", 3, 12, 40, 24, one(1), false},
		{"more inputs, subsampled", 3, 36, 9, 48, one(2), true},
		{"more inputs, several depth blocks", 2, 70, 17, 32, one(1), true},
		{"more inputs, groups of images", 7, 48, 11, 8, one(1), true},
		{"more inputs, subsampled groups", 5, 30, 7, 14, one(2), true},
		{"more inputs, groups in two blocks of rows", 9, 520, 16, 8, one(1), true},
		{"transposedMaxOutputs outputs", 2, transposedMinRatio * transposedMaxOutputs, transposedMaxOutputs, 24, one(1), true},
		{"four times the inputs, more outputs than transposedMaxOutputs", 2, transposedMinRatio * (transposedMaxOutputs + 1), transposedMaxOutputs + 1, 24, one(1), false},
		{"fewer than transposedMinRatio times the inputs", 2, transposedMinRatio*20 - 1, 20, 24, one(1), false},
	} {
		x, w := randTensor(rng, c.n, c.c, c.hw, c.hw), randTensor(rng, c.f, c.c, 1, 1)
		g := geom(x, w, c.p)
		if transposedWeightGrad(g, c.p) != c.transposed {
			t.Fatalf("%s: transposed %v: not the case meant", c.name, transposedWeightGrad(g, c.p))
		}
		dy := randTensor(rng, c.n, c.f, g.oh, g.ow)
		for _, threads := range []int{1, 2} {
			be := New(threads)
			dw := tensor.New(w.Shape...)
			be.Conv2dBackward(x, w, dy, nil, dw, nil, c.p)
			clear(dw.Data) // a second call, on buffers the first has used
			be.Conv2dBackward(x, w, dy, nil, dw, nil, c.p)
			be.Close()

			// The reference: dy_i · x_iᵀ for a group of images at a time,
			// as one product over their columns side by side (groupColumns),
			// each chunk's groups summed alone.
			ref := gemm.New(1)
			want := make([]float32, len(dw.Data))
			per := (c.n + threads - 1) / threads
			group := max(1, min(per, groupColumns/g.ohw))
			for lo := 0; lo < c.n; lo += per {
				hi := min(lo+per, c.n)
				chunk := make([]float32, len(want))
				for first := lo; first < hi; first += group {
					n := min(group, hi-first)
					ld := n * g.ohw
					img, dyg := make([]float32, c.c*ld), make([]float32, c.f*ld)
					for k := range n {
						i := first + k
						for ch := range c.c { // the image as the 1×1 kernel reads it
							for oy := range g.oh {
								for ox := range g.ow {
									img[ch*ld+k*g.ohw+oy*g.ow+ox] = x.Data[((i*c.c+ch)*c.hw+oy*c.p.StrideH)*c.hw+ox*c.p.StrideW]
								}
							}
						}
						for f := range c.f {
							copy(dyg[f*ld+k*g.ohw:f*ld+(k+1)*g.ohw], dy.Data[(i*c.f+f)*g.ohw:])
						}
					}
					must(ref.Sgemm(c.f, c.c, ld, 1, gemm.Matrix{Data: dyg, Stride: ld}, gemm.Matrix{Data: img, Stride: ld, Trans: true}, 1, gemm.Matrix{Data: chunk, Stride: c.c}))
				}
				for j, v := range chunk {
					want[j] += v
				}
			}
			ref.Close()
			label := fmt.Sprintf("%s, %d threads", c.name, threads)
			for j, v := range want {
				if math.Float32bits(dw.Data[j]) != math.Float32bits(v) {
					t.Fatalf("%s: dW[%d] = %v, group by group %v", label, j, dw.Data[j], v)
				}
			}
		}
	}
}
