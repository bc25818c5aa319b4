package cpu

import (
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// TestTrim checks which kernels lose taps that meet only padding, and the
// convolution each is run as; TestConvolution checks the results.
func TestTrim(t *testing.T) {
	k3 := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}
	k3s2 := tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 2, StrideW: 2, PadH: 1, PadW: 1}
	cases := []struct {
		name   string
		h, w   int
		p      tensor.ConvParams
		ok     bool
		want   tensor.ConvParams
		h0, w0 int
	}{
		{"3×3 on 1×1: the centre", 1, 1, k3, true, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}, 1, 1},
		{"3×3 stride 2 on 2×2: four taps", 2, 2, k3s2, true, tensor.ConvParams{KernelH: 2, KernelW: 2, StrideH: 2, StrideW: 2}, 1, 1},
		{"3×3 on 1×5: the middle row", 1, 5, k3, true, tensor.ConvParams{KernelH: 1, KernelW: 3, StrideH: 1, StrideW: 1, PadW: 1}, 1, 0},
		{"5×5 pad 2 on 2×2: three rows and columns", 2, 2, tensor.ConvParams{KernelH: 5, KernelW: 5, StrideH: 1, StrideW: 1, PadH: 2, PadW: 2}, true,
			tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}, 1, 1},
		{"5×5 stride 3 pad 2 on 3×3", 3, 3, tensor.ConvParams{KernelH: 5, KernelW: 5, StrideH: 3, StrideW: 3, PadH: 2, PadW: 2}, true,
			tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 3, StrideW: 3}, 2, 2},
		{"3×3 on 2×2 keeps every tap", 2, 2, k3, false, tensor.ConvParams{}, 0, 0},
		{"3×3 stride 2 on 4×4 keeps every tap", 4, 4, k3s2, false, tensor.ConvParams{}, 0, 0},
		{"7×7 stride 2 on 224×224", 224, 224, tensor.ConvParams{KernelH: 7, KernelW: 7, StrideH: 2, StrideW: 2, PadH: 3, PadW: 3}, false, tensor.ConvParams{}, 0, 0},
		{"stride 4, padding 4 on 2×2: the live taps alone would make a third output", 2, 2,
			tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 4, StrideW: 4, PadH: 4, PadW: 4}, false, tensor.ConvParams{}, 0, 0},
		{"unpadded", 3, 3, tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: 1, StrideW: 1}, false, tensor.ConvParams{}, 0, 0},
	}
	for _, c := range cases {
		got, ok := trim(tensor.New(1, 1, c.h, c.w), c.p)
		if ok != c.ok || ok && (got.p != c.want || got.h0 != c.h0 || got.w0 != c.w0) {
			t.Errorf("%s: trim = %+v, %v; want %+v from (%d, %d), %v", c.name, got.p, ok, c.want, c.h0, c.w0, c.ok)
		}
	}
}

// TestTrimmedWeights checks the live taps' weights and the scatter of
// their gradient back into the layer's kernel on a 5×5 kernel with its
// 3×3 centre live.
func TestTrimmedWeights(t *testing.T) {
	tr := trimmedConv{p: tensor.ConvParams{KernelH: 3, KernelW: 2, StrideH: 1, StrideW: 1}, h0: 1, w0: 2}
	w := tensor.New(2, 3, 5, 5)
	for i := range w.Data {
		w.Data[i] = float32(i)
	}
	var live *tensor.Tensor
	got := tr.weights(&live, w)
	for k := range 6 {
		for i := range 3 {
			for j := range 2 {
				if want := w.Data[k*25+(1+i)*5+2+j]; got.Data[k*6+i*2+j] != want {
					t.Fatalf("kernel %d tap (%d, %d) = %v, want %v", k, i, j, got.Data[k*6+i*2+j], want)
				}
			}
		}
	}
	dw := tensor.New(w.Shape...)
	tr.addWeightGrad(dw, got.Data)
	tr.addWeightGrad(dw, got.Data)
	for i, v := range dw.Data {
		tap := i % 25
		live := tap/5 >= 1 && tap/5 <= 3 && tap%5 >= 2 && tap%5 <= 3
		if want := float32(0); live && v != 2*w.Data[i] || !live && v != want {
			t.Fatalf("dw[%d] = %v (tap %d, live %v), want %v", i, v, tap, live, map[bool]float32{true: 2 * w.Data[i], false: 0}[live])
		}
	}
}
