package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// TestWinograd4 checks F(4×4, 3×3) forward passes, with and without a
// bias, against the float64 definition, on maps of one tile to several,
// sizes that leave 1, 2 or 3 outputs of the last tiles inside, maps not
// square, paddings 0 to 2, groups of images (a ragged last one) and one
// image, on 1 and 2 threads; the vector kernels and the loops give the
// same bits, and so does each image alone. The error bound is relative
// to the sum of the magnitudes each output adds up.
func TestWinograd4(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		n, c, f, h, w, pad int
	}{
		{3, 5, 7, 4, 4, 1},     // one tile an image
		{20, 4, 6, 8, 8, 1},    // 4 tiles an image: a group of 64 images would take them all (ragged at 2 threads)
		{3, 3, 5, 7, 7, 1},     // the last tiles 3 outputs inside
		{2, 5, 3, 6, 11, 1},    // not square: 2 and 3 outputs inside
		{3, 2, 4, 7, 11, 0},    // no padding: 5×9 outputs, 1 inside
		{2, 3, 2, 5, 6, 2},     // padding 2: 7×8 outputs
		{1, 16, 24, 12, 12, 1}, // one image: products over threads
		{70, 3, 4, 8, 8, 1},    // more images than a group of 64
		{4, 33, 17, 16, 16, 1}, // wider maps, ragged channels
	}
	worst := 0.0 // the largest error, as a fraction of its bound
	for _, threads := range []int{1, 2} {
		for _, c := range cases {
			p := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: c.pad, PadW: c.pad}
			x, w, bias := randTensor(rng, c.n, c.c, c.h, c.w), randTensor(rng, c.f, c.c, 3, 3), randTensor(rng, c.f)
			oh, ow := p.OutSize(c.h, c.w)
			var got [2][2]*tensor.Tensor // by kernels: y with the bias, without
			for i, vector := range []bool{false, true} {
				if vector && !hasVectorOps() {
					got[i] = got[0]
					continue
				}
				be := New(threads)
				be.SetConvAlgorithm(ConvWinograd)
				be.winoTile = 4
				if !vector {
					be.vec = vecOps{}
				}
				y, y0 := tensor.New(c.n, c.f, oh, ow), tensor.New(c.n, c.f, oh, ow)
				be.Conv2d(x, w, bias, y, p)
				be.Conv2d(x, w, nil, y0, p)
				if be.conv.tile != 4 {
					t.Fatalf("case %+v: F(4×4, 3×3) not chosen", c)
				}
				for k := range c.n { // each image alone
					one := tensor.New(1, c.f, oh, ow)
					xk, err := tensor.FromData(x.Data[k*c.c*c.h*c.w:(k+1)*c.c*c.h*c.w], 1, c.c, c.h, c.w)
					if err != nil {
						t.Fatal(err)
					}
					be.Conv2d(xk, w, bias, one, p)
					sameBits(t, fmt.Sprintf("threads %d, case %+v, image %d alone", threads, c, k), one.Data, y.Data[k*len(one.Data):(k+1)*len(one.Data)])
				}
				got[i] = [2]*tensor.Tensor{y, y0}
				be.Close()
			}
			for j, name := range []string{"y", "y without bias"} {
				sameBits(t, fmt.Sprintf("threads %d, case %+v, %s: the vector kernels against the loops", threads, c, name), got[1][j].Data, got[0][j].Data)
			}
			wy, _, _, _ := referenceConv(x, w, bias, tensor.New(c.n, c.f, oh, ow), p)
			wy0, _, _, _ := referenceConv(x, w, tensor.New(c.f), tensor.New(c.n, c.f, oh, ow), p)
			// Each output sums 9·C products of values below about 3; the
			// bound is four times TestWinograd's.
			tol := 2e-7 * 9 * float64(9*c.c) * 4
			for j, want := range [][]float64{wy, wy0} {
				for i, v := range want {
					e := math.Abs(float64(got[0][j].Data[i]) - v)
					if e > tol {
						t.Fatalf("threads %d, case %+v: y[%d] = %v, want %v (±%.2g)", threads, c, i, got[0][j].Data[i], v, tol)
					}
					worst = max(worst, e/tol)
				}
			}
		}
	}
	t.Logf("the largest error is %.2g of its bound", worst)
}

// TestWinograd4Choice: frozen layers' forward passes run 4×4 tiles with
// the vector kernels up to 256 × 512 kernels; layers in training (no
// preparation, or one kept for a backward pass), larger ones and the
// loops 2×2 ones, unless a test forces either.
func TestWinograd4Choice(t *testing.T) {
	small, large := geometry{c: 256, f: 512}, geometry{c: 512, f: 512}
	for _, c := range []struct {
		vector bool
		g      geometry
		prep   *prepared
		tile   int
		want   bool
	}{
		{true, small, &prepared{}, 0, true},
		{true, large, &prepared{}, 0, false}, // U too large
		{true, small, nil, 0, false},
		{true, small, &prepared{forBackward: true}, 0, false},
		{false, small, &prepared{}, 0, false},
		{true, small, &prepared{}, 2, false},
		{false, large, nil, 4, true},
	} {
		be := &Backend{vec: vecOps{vector: c.vector}, winoTile: c.tile}
		if got := be.useWinograd4(c.g, c.prep); got != c.want {
			t.Errorf("vector kernels %v, %d → %d channels, prepared %+v, tile forced to %d: 4×4 tiles %v, want %v", c.vector, c.g.c, c.g.f, c.prep, c.tile, got, c.want)
		}
	}
}

// TestWinograd4Rounding measures F(4×4, 3×3)'s rounding where it runs,
// on CIFARNet's layers (unit normal inputs, kaiming-normal weights)
// against the float64 definition, and holds it to what winograd4.go
// states: within 5e-6 of the outputs' RMS on average, 1e-4 at worst (2×2
// tiles: within 1e-6 and 5e-6).
func TestWinograd4Rounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	p := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	for _, c := range []struct{ n, c, f, hw int }{{4, 64, 128, 16}, {4, 128, 256, 8}} {
		x, w := randTensor(rng, c.n, c.c, c.hw, c.hw), randTensor(rng, c.f, c.c, 3, 3)
		for i := range w.Data {
			w.Data[i] *= float32(math.Sqrt(2 / float64(9*c.f)))
		}
		want, _, _, _ := referenceConv(x, w, tensor.New(c.f), tensor.New(c.n, c.f, c.hw, c.hw), p)
		var sq float64
		for _, v := range want {
			sq += v * v
		}
		scale := math.Sqrt(sq / float64(len(want))) // the outputs' RMS
		for _, b := range []struct {
			tile            int
			meanTol, maxTol float64
		}{{2, 1e-6, 5e-6}, {4, 5e-6, 1e-4}} {
			be := New(1)
			be.SetConvAlgorithm(ConvWinograd)
			be.winoTile = b.tile
			y := tensor.New(c.n, c.f, c.hw, c.hw)
			be.Conv2d(x, w, nil, y, p)
			be.Close()
			var esq, worst float64
			for i, v := range want {
				e := float64(y.Data[i]) - v
				esq += e * e
				worst = max(worst, math.Abs(e))
			}
			rms, worst := math.Sqrt(esq/float64(len(want)))/scale, worst/scale
			t.Logf("%d → %d channels, %d×%d, %d×%d tiles: error %.2g of the outputs' RMS on average, %.2g at worst", c.c, c.f, c.hw, c.hw, b.tile, b.tile, rms, worst)
			if rms > b.meanTol || worst > b.maxTol {
				t.Errorf("%d → %d channels, %d×%d tiles: error %.2g on average (bound %.2g), %.2g at worst (bound %.2g)", c.c, c.f, b.tile, b.tile, rms, b.meanTol, worst, b.maxTol)
			}
		}
	}
}
