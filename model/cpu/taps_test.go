package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/parallel"
	"github.com/gorun/gorun/model/tensor"
)

// TestTrim checks which kernels lose taps that meet only padding, and the
// convolution each is run as; TestConvolution checks the results.
func TestTrim(t *testing.T) {
	k3, k3s2 := padded3x3(1), padded3x3(2)
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
// their gradient back into the layer's kernel: a 3×2 block of a 5×5
// kernel and the centre of a 3×3, on few kernels (copied on one thread)
// and on many (split over three).
func TestTrimmedWeights(t *testing.T) {
	pool := parallel.New(3)
	defer pool.Close()
	block := trimmedConv{p: tensor.ConvParams{KernelH: 3, KernelW: 2, StrideH: 1, StrideW: 1}, h0: 1, w0: 2}
	centre := trimmedConv{p: tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}, h0: 1, w0: 1}
	for _, c := range []struct {
		name  string
		tr    trimmedConv
		shape []int
	}{
		{"3×2 of 5×5, few kernels", block, []int{2, 3, 5, 5}},
		{"3×2 of 5×5, many kernels", block, []int{64, 48, 5, 5}},
		{"centre of 3×3, few kernels", centre, []int{4, 5, 3, 3}},
		{"centre of 3×3, many kernels", centre, []int{512, 16, 3, 3}},
	} {
		w := tensor.New(c.shape...)
		for i := range w.Data {
			w.Data[i] = float32(i)
		}
		kh, kw := c.shape[2], c.shape[3]
		th, tw := c.tr.p.KernelH, c.tr.p.KernelW
		var live *tensor.Tensor
		var task tapsTask
		got := c.tr.weights(pool, &task, &live, w)
		if !got.SameShape(c.shape[0], c.shape[1], th, tw) {
			t.Fatalf("%s: trimmed kernel %v, want [%d %d %d %d]", c.name, got.Shape, c.shape[0], c.shape[1], th, tw)
		}
		for k := range c.shape[0] * c.shape[1] {
			for i := range th {
				for j := range tw {
					if want := w.Data[k*kh*kw+(c.tr.h0+i)*kw+c.tr.w0+j]; got.Data[k*th*tw+i*tw+j] != want {
						t.Fatalf("%s: kernel %d tap (%d, %d) = %v, want %v", c.name, k, i, j, got.Data[k*th*tw+i*tw+j], want)
					}
				}
			}
		}
		dw := tensor.New(w.Shape...)
		c.tr.addWeightGrad(dw, got.Data)
		c.tr.addWeightGrad(dw, got.Data)
		for i, v := range dw.Data {
			r, col := i%(kh*kw)/kw, i%kw
			want := float32(0)
			if r >= c.tr.h0 && r < c.tr.h0+th && col >= c.tr.w0 && col < c.tr.w0+tw {
				want = 2 * w.Data[i]
			}
			if v != want {
				t.Fatalf("%s: dw[%d] = %v, want %v", c.name, i, v, want)
			}
		}
	}
}

// TestSmallMaps runs convolutions over maps no larger than their kernels
// — as ResNet-18's on CIFAR-10's 2×2 and 1×1 maps — over maps with dead
// kernel rows, and strided ones onto small outputs, under every
// algorithm choice, against the float64 reference: ConvAuto runs the
// first as dense matrices (dense.go), the second with their live taps
// alone (taps.go), the third's forward pass by rows (rows.go); the forced
// algorithms trim taps too. Evaluation-mode batch norm fused into the convolution
// (and its relu) is checked against the reference's outputs normalised.
func TestSmallMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	k3, k3s2 := padded3x3(1), padded3x3(2)
	for _, c := range []struct {
		name          string
		n, c, f, h, w int
		p             tensor.ConvParams
		dense, trim   bool // the paths ConvAuto takes
		rows          bool // and the forward pass's, untrimmed (rows.go)
	}{
		{"3×3 on 2×2", 9, 24, 20, 2, 2, k3, true, false, false},
		{"3×3 on 1×1", 7, 33, 18, 1, 1, k3, true, false, false},
		{"3×3 stride 2 on 2×2", 5, 16, 32, 2, 2, k3s2, true, false, false},
		{"1×1 on 1×1", 6, 40, 24, 1, 1, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}, true, false, false},
		{"1×1 padding 1 on 1×1: outputs that read nothing", 6, 40, 24, 1, 1, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1, PadH: 1, PadW: 1}, true, false, false},
		{"3×3 on 3×3", 4, 8, 12, 3, 3, k3, true, false, false},
		{"3×3 on 2×2, 72 channels: Vᵀ past one depth block of the packing", 3, 72, 10, 2, 2, k3, true, false, false},
		{"3×3 on 1×12: its middle row alone", 5, 16, 20, 1, 12, k3, false, true, false},
		{"3×3 on 12×1: its middle column alone", 5, 16, 20, 12, 1, k3, false, true, false},
		{"3×3 on 4×4 keeps every tap", 3, 16, 16, 4, 4, k3, false, false, false},
		{"3×3 stride 2 on 8×8 (ResNet-18's layer2 on CIFAR-10): by rows", 5, 16, 24, 8, 8, k3s2, false, false, true},
		{"3×3 stride 2 on 4×4, 40 channels: by rows", 33, 40, 12, 4, 4, k3s2, false, false, true},
		{"5×5 stride 2 on 7×7, 17 channels: by rows", 3, 17, 9, 7, 7, tensor.ConvParams{KernelH: 5, KernelW: 5, StrideH: 2, StrideW: 2, PadH: 2, PadW: 2}, false, false, true},
		{"3×2 stride 2×1 on 6×3, 20 channels: by rows", 4, 20, 8, 6, 3, tensor.ConvParams{KernelH: 3, KernelW: 2, StrideH: 2, StrideW: 1, PadH: 1}, false, false, true},
		{"3×3 stride 2 on 8×8, 15 channels: im2col", 3, 15, 8, 8, 8, k3s2, false, false, false},
		{"3×3 stride 2 on 10×10: five wide, im2col", 3, 16, 8, 10, 10, k3s2, false, false, false},
	} {
		x := randTensor(rng, c.n, c.c, c.h, c.w)
		w, bias := randTensor(rng, c.f, c.c, c.p.KernelH, c.p.KernelW), randTensor(rng, c.f)
		oh, ow := c.p.OutSize(c.h, c.w)
		dy := randTensor(rng, c.n, c.f, oh, ow)
		wy, wdx, wdw, wdb := referenceConv(x, w, bias, dy, c.p)
		gamma, beta, mean, variance := randTensor(rng, c.f), randTensor(rng, c.f), randTensor(rng, c.f), randTensor(rng, c.f)
		for i := range variance.Data {
			variance.Data[i] = 0.5 + variance.Data[i]*variance.Data[i]
		}
		for _, threads := range []int{1, 2} {
			for _, algo := range []ConvAlgorithm{ConvAuto, ConvIm2col, ConvWinograd} {
				label := fmt.Sprintf("%s, threads %d, algorithm %d", c.name, threads, algo)
				be := New(threads)
				be.SetConvAlgorithm(algo)
				if algo == ConvAuto {
					_, trimmed := trim(x, c.p)
					if dense := be.useDense(geom(x, w, c.p), c.p); dense != c.dense || !dense && trimmed != c.trim {
						t.Errorf("%s: dense %v, trimmed %v; want %v, %v", label, dense, trimmed, c.dense, c.trim)
					}
					g := geom(x, w, c.p)
					if rows := !c.dense && !trimmed && !be.useWinograd(g, c.p) && be.useRows(g, c.p); rows != (c.rows && be.vec.vector) {
						t.Errorf("%s: by rows %v, want %v", label, rows, c.rows)
					}
				}
				y := tensor.New(c.n, c.f, oh, ow)
				dx, dw, db := tensor.New(x.Shape...), randTensor(rng, w.Shape...), randTensor(rng, c.f)
				dw0, db0 := dw.Clone(), db.Clone() // gradients add to what is there
				be.Conv2d(x, w, bias, y, c.p)
				be.Conv2dBackward(x, w, dy, dx, dw, db, c.p)
				for _, r := range []struct {
					name      string
					got, base []float32
					want      []float64
				}{{"y", y.Data, nil, wy}, {"dx", dx.Data, nil, wdx}, {"dw", dw.Data, dw0.Data, wdw}, {"db", db.Data, db0.Data, wdb}} {
					for i, v := range r.want {
						if r.base != nil {
							v += float64(r.base[i])
						}
						if math.Abs(float64(r.got[i])-v) > 1e-4*(1+math.Abs(v)) {
							t.Fatalf("%s: %s[%d] = %v, want %v", label, r.name, i, r.got[i], v)
						}
					}
				}
				// From zero gradients: the same bits with parts of the
				// backward pass alone, and image by image.
				zdx, zdw, zdb := tensor.New(x.Shape...), tensor.New(w.Shape...), tensor.New(c.f)
				be.Conv2dBackward(x, w, dy, zdx, zdw, zdb, c.p)
				checkSplitBackward(t, be, x, w, dy, zdx, zdw, zdb, c.p, label)
				if c.n >= threads {
					checkImagesAlone(t, threads, algo, x, w, bias, dy, y, zdx, zdw, c.p, label)
				}
				for _, relu := range []bool{false, true} {
					be.Conv2dBatchNorm(x, w, bias, y, gamma, beta, mean, variance, c.p, tensor.BatchNormParams{Eps: 1e-5}, relu)
					for i, v := range wy {
						f := i / (oh * ow) % c.f
						want := (v-float64(mean.Data[f]))/math.Sqrt(float64(variance.Data[f])+1e-5)*float64(gamma.Data[f]) + float64(beta.Data[f])
						if relu {
							want = max(want, 0)
						}
						if math.Abs(float64(y.Data[i])-want) > 1e-4*(1+math.Abs(want)) {
							t.Fatalf("%s, batch norm fused (relu %v): y[%d] = %v, want %v", label, relu, i, y.Data[i], want)
						}
					}
				}
				be.Close()
			}
		}
	}
}
