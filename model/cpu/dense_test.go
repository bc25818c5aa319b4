package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// TestDenseMatrixSameBits: denseTask builds V and folds dV into the
// kernel's gradient with the bits of the plain loops — output by output,
// input by input, then over the channels — whichever parts the filters
// are split into: V's values are copies, and each tap's gradient adds
// its values in the same order.
func TestDenseMatrixSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	one := tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}
	onePadded := one
	onePadded.PadH, onePadded.PadW = 1, 1
	for _, c := range []struct {
		name        string
		c, f, h, wd int
		p           tensor.ConvParams
	}{
		{"3×3 on 2×2", 24, 20, 2, 2, padded3x3(1)},
		{"3×3 on 1×1", 33, 18, 1, 1, padded3x3(1)},
		{"3×3 stride 2 on 2×2", 16, 32, 2, 2, padded3x3(2)},
		{"3×3 on 3×3", 8, 12, 3, 3, padded3x3(1)},
		{"1×1 on 1×1", 40, 24, 1, 1, one},
		{"1×1 padding 1 on 1×1", 40, 24, 1, 1, onePadded},
	} {
		x, w := tensor.New(1, c.c, c.h, c.wd), randTensor(rng, c.f, c.c, c.p.KernelH, c.p.KernelW)
		g := geom(x, w, c.p)
		hw, kk := g.h*g.wd, c.p.KernelH*c.p.KernelW
		row := g.c * hw
		tab := make([]int32, g.ohw*hw)
		denseTaps(tab, g, c.p)
		dv := randTensor(rng, g.f*g.ohw, row).Data
		dw0 := randTensor(rng, w.Shape...).Data

		wantV := make([]float32, g.f*g.ohw*row)
		wantDW := append([]float32(nil), dw0...)
		for f := range g.f {
			for j := range g.ohw {
				for i, tap := range tab[j*hw : (j+1)*hw] {
					for ch := range g.c {
						at := (f*g.ohw+j)*row + ch*hw + i
						if tap >= 0 {
							wantV[at] = w.Data[(f*g.c+ch)*kk+int(tap)]
							wantDW[(f*g.c+ch)*kk+int(tap)] += dv[at]
						}
					}
				}
			}
		}

		for _, per := range []int{g.f, 5, 1} {
			v := make([]float32, len(wantV))
			for i := range v {
				v[i] = float32(math.NaN()) // every value is written, zeros included
			}
			build := denseTask{g: g, kk: kk, tab: tab, w: w.Data, v: v, per: per}
			dw := append([]float32(nil), dw0...)
			fold := denseTask{fold: true, g: g, kk: kk, tab: tab, w: dw, v: dv, per: per}
			for part := range ceilDiv(g.f, per) {
				build.Do(0, part)
				fold.Do(0, part)
			}
			for i := range wantV {
				if math.Float32bits(v[i]) != math.Float32bits(wantV[i]) {
					t.Fatalf("%s, %d filters a part: V[%d] = %v, want %v", c.name, per, i, v[i], wantV[i])
				}
			}
			for i := range wantDW {
				if math.Float32bits(dw[i]) != math.Float32bits(wantDW[i]) {
					t.Fatalf("%s, %d filters a part: dW[%d] = %v, want %v", c.name, per, i, dw[i], wantDW[i])
				}
			}
		}
	}
}
