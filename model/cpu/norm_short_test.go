package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// TestBatchNormShortPlanes holds batch norm over planes shorter than a
// vector (norm_short.go) to the per-plane path it replaced (bnPerPlane),
// bit for bit: every plane length from 1 to 7, channel counts that split
// unevenly over the threads, batches large enough to be split at all,
// with and without the fused relu, training and evaluation, with and
// without statistics combined across replicas, on one and two threads;
// inputs off zero and on it, exact zeros among them.
func TestBatchNormShortPlanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	shapes := [][]int{{5, 37, 1, 1}, {3, 9, 1, 2}, {4, 11, 3, 1}, {6, 13, 2, 2}, {2, 7, 1, 5}, {3, 6, 2, 3}, {2, 5, 1, 7},
		{40, 203, 1, 1}, {32, 67, 2, 2}, {9, 31}}
	batchNormCases(t, shapes, func(be *Backend, name string, shape []int, p tensor.BatchNormParams) {
		c := shape[1]
		x, dy := randTensor(rng, shape...), randTensor(rng, shape...)
		for i := range x.Data {
			switch rng.IntN(8) {
			case 0:
				x.Data[i] = 0
			case 1:
				x.Data[i] = x.Data[i]*0.5 + 30 // off zero, as activations can be
			}
		}
		gamma, beta := randTensor(rng, c), randTensor(rng, c)
		for _, relu := range []bool{false, true} {
			run := func(perPlane bool) bnOuts {
				be.bnPerPlane = perPlane
				defer func() { be.bnPerPlane = false }()
				return newBNOuts(shape, 0.25, 1.5).run(be, x, dy, gamma, beta, p, relu)
			}
			sameBNBits(t, fmt.Sprintf("%s/relu=%v", name, relu), run(false), run(true), "the per-plane path gives %v")
		}
	})
}

// TestShortTotal holds shortTotal to laneSums, the vector kernels'
// order of addition, for every short length, on terms whose sum depends
// on that order.
func TestShortTotal(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for n := 1; n < minVectorRow; n++ {
		for range 200 {
			var a [minVectorRow]float64
			var l laneSums
			for i := range n {
				a[i] = float64((rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(33)-16))) // rounded: not to be fused into laneSums' adds
				l.add(i, n, a[i], 0)
			}
			want, _ := l.totals()
			if got := shortTotal(&a, n); got != want {
				t.Fatalf("n=%d, terms %v: shortTotal %v, laneSums %v", n, a[:n], got, want)
			}
		}
	}
}

// TestShortPhasesMatchPlanes holds each short-plane loop to the vector
// kernels and loops it stands in for, called plane by plane as
// phaseChannel calls them: the float64 sums exactly (terms spread over 32
// orders of magnitude, so that any other order of addition shows), the
// elements bit for bit (NaN, ±0 and ±Inf among the inputs).
func TestShortPhasesMatchPlanes(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	wide := func() float32 { return float32((rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(17)-8))) }
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}
	for _, o := range []vecOps{{}, {vector: hasVectorOps()}} {
		for hw := 1; hw < minVectorRow; hw++ {
			const nch = 23
			cf := make([]bnCoefs, nch)
			for ch := range cf {
				cf[ch] = bnCoefs{k: float64(wide()), a: wide(), bx: wide(), mu: wide(), d: wide(), scale: wide(), shift: wide()}
			}
			x, g := make([]float32, nch*hw), make([]float32, nch*hw)
			for i := range x {
				x[i], g[i] = wide(), wide()
			}
			plane := func(v []float32, ch int) []float32 { return v[ch*hw : ch*hw+hw] }
			for _, relu := range []bool{false, true} {
				// The sums, on finite terms.
				s1, s2 := make([]float64, nch), make([]float64, nch)
				shortMoments(cf, x, s1, s2, hw)
				sums := make([]float64, 2*nch)
				shortGradSums(cf, x, g, sums, hw, relu)
				for ch, k := range cf {
					a, b := o.moments(plane(x, ch), k.k)
					if a != s1[ch] || b != s2[ch] {
						t.Fatalf("vector %v, hw %d, channel %d: moments %v, %v; per plane %v, %v", o.vector, hw, ch, s1[ch], s2[ch], a, b)
					}
					if relu {
						a, b = o.gradSumsReLU(plane(x, ch), plane(g, ch), k.k, k.scale, k.shift)
					} else {
						a, b = o.gradSums(plane(x, ch), plane(g, ch), k.k)
					}
					if a != sums[2*ch] || b != sums[2*ch+1] {
						t.Fatalf("vector %v, hw %d, relu %v, channel %d: gradient sums %v, %v; per plane %v, %v", o.vector, hw, relu, ch, sums[2*ch], sums[2*ch+1], a, b)
					}
				}
				// The elements, with special values among the inputs.
				xs, gs := append([]float32(nil), x...), append([]float32(nil), g...)
				for i := range xs {
					if rng.IntN(4) == 0 {
						xs[i] = special[rng.IntN(len(special))]
					}
					if rng.IntN(4) == 0 {
						gs[i] = special[rng.IntN(len(special))]
					}
				}
				y, want := make([]float32, len(xs)), make([]float32, len(xs))
				same := func(what string) {
					t.Helper()
					for i := range want {
						if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
							t.Fatalf("vector %v, hw %d, relu %v: %s[%d] = %v (x %v, g %v); per plane %v", o.vector, hw, relu, what, i, y[i], xs[i], gs[i], want[i])
						}
					}
				}
				scales, shifts := make([]float32, nch), make([]float32, nch)
				for ch, k := range cf {
					scales[ch], shifts[ch] = k.scale, k.shift
				}
				affineRows(y, xs, hw, scales, shifts, relu)
				for ch, k := range cf {
					if relu {
						o.affineReLU(plane(want, ch), plane(xs, ch), k.scale, k.shift)
					} else {
						o.affine(plane(want, ch), plane(xs, ch), k.scale, k.shift)
					}
				}
				same("normalised")
				shortGradInput(cf, xs, gs, y, hw, relu, true)
				for ch, k := range cf {
					if relu {
						o.bnGradReLU(plane(want, ch), plane(gs, ch), plane(xs, ch), k.a, k.bx, k.mu, k.d, k.scale, k.shift)
					} else {
						o.bnGrad(plane(want, ch), plane(gs, ch), plane(xs, ch), k.a, k.bx, k.mu, k.d)
					}
				}
				same("input gradient")
			}
		}
	}
}
