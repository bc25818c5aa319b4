package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/tensor"
)

// TestConvPrepared runs layers of every path the forward pass takes
// through Conv2dPrepared and checks that a prepared call gives the bits
// of Conv2d and Conv2dBatchNorm (and Conv2dPreparedResidual those of
// Conv2dBatchNorm then AddReLU), on its first call (preparing) and after
// (reusing); that it keeps the form its path multiplies; that it reuses
// it (weights changed without a Reset still give the old output, as
// nn.Freeze forbids, here to see the form was kept); that Reset prepares
// anew; and that another input map prepares anew without a Reset.
func TestConvPrepared(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	k3, k3s2 := padded3x3(1), padded3x3(2)
	type form int
	const (
		none form = iota // im2col + GEMM: nothing but the live taps kept
		dense
		winograd
		rows
	)
	for _, c := range []struct {
		name          string
		n, c, f, h, w int
		p             tensor.ConvParams
		form          form
		trim          bool
		other         [2]int // another input map for the same layer
	}{
		{"3×3 on 2×2: dense", 5, 24, 20, 2, 2, k3, dense, false, [2]int{1, 1}},
		{"3×3 on 1×1: dense", 3, 33, 18, 1, 1, k3, dense, false, [2]int{2, 2}},
		{"3×3 on 8×8, 64 channels: Winograd", 3, 64, 64, 8, 8, k3, winograd, false, [2]int{6, 6}},
		{"3×3 on 4×4, 64 channels: Winograd, channels innermost", 4, 64, 72, 4, 4, k3, winograd, false, [2]int{8, 8}},
		{"3×3 on 4×4, 256 channels: Winograd, its form too large to keep", 2, 256, 256, 4, 4, k3, none, false, [2]int{8, 8}},
		{"3×3 on 16×16, 64 channels: Winograd, U kept but not packed", 2, 64, 64, 16, 16, k3, winograd, false, [2]int{12, 12}},
		{"3×3 stride 2 on 8×8: by rows", 3, 16, 24, 8, 8, k3s2, rows, false, [2]int{6, 6}},
		{"3×3 on 1×12: live taps, im2col", 3, 16, 20, 1, 12, k3, none, true, [2]int{4, 12}},
		{"7×7 stride 2 on 12×12: im2col", 2, 3, 16, 12, 12, tensor.ConvParams{KernelH: 7, KernelW: 7, StrideH: 2, StrideW: 2, PadH: 3, PadW: 3}, none, false, [2]int{10, 10}},
		{"1×1 on 6×6, one image: the image itself", 1, 16, 24, 6, 6, tensor.ConvParams{KernelH: 1, KernelW: 1, StrideH: 1, StrideW: 1}, none, false, [2]int{4, 4}},
	} {
		for _, threads := range []int{1, 2} {
			label := fmt.Sprintf("%s, %d threads", c.name, threads)
			be := New(threads)
			if (c.form == rows || c.form == winograd && c.h == 4) && !be.vec.vector {
				be.Close()
				continue // these paths need the vector kernels; the others run on every build
			}
			x := randTensor(rng, c.n, c.c, c.h, c.w)
			w, bias := randTensor(rng, c.f, c.c, c.p.KernelH, c.p.KernelW), randTensor(rng, c.f)
			gamma, beta, mean, variance := randTensor(rng, c.f), randTensor(rng, c.f), randTensor(rng, c.f), randTensor(rng, c.f)
			for i := range variance.Data {
				variance.Data[i] = 0.5 + variance.Data[i]*variance.Data[i]
			}
			bn := tensor.BatchNormParams{Eps: 1e-5}
			oh, ow := c.p.OutSize(c.h, c.w)
			want, wantBN := tensor.New(c.n, c.f, oh, ow), tensor.New(c.n, c.f, oh, ow)
			// Conv2d and Conv2dBatchNorm with the tiles prepared Winograd
			// layers run (useWinograd4).
			reference := func(x, y *tensor.Tensor, fused bool) {
				if be.vec.vector {
					be.winoTile = 4
				}
				if fused {
					be.Conv2dBatchNorm(x, w, bias, y, gamma, beta, mean, variance, c.p, bn, true)
				} else {
					be.Conv2d(x, w, bias, y, c.p)
				}
				be.winoTile = 0
			}
			reference(x, want, false)
			reference(x, wantBN, true)
			// A residual block's last convolution, without a bias as
			// torchvision's: batch norm, then the sum and relu.
			residual, wantRes := randTensor(rng, c.n, c.f, oh, ow), tensor.New(c.n, c.f, oh, ow)
			if be.vec.vector {
				be.winoTile = 4
			}
			be.Conv2dBatchNorm(x, w, nil, wantRes, gamma, beta, mean, variance, c.p, bn, false)
			be.winoTile = 0
			be.AddReLU(wantRes, residual, wantRes)

			var prep, prepBN, prepRes tensor.PreparedWeights
			y := tensor.New(c.n, c.f, oh, ow)
			for call := range 2 {
				be.Conv2dPrepared(&prep, x, w, bias, y, nil, nil, nil, nil, c.p, bn, false)
				if be.conv.winograd && be.conv.tile != 4 && be.vec.vector {
					t.Fatalf("%s: a prepared Winograd layer ran %d×%d tiles, want 4×4", label, be.conv.tile, be.conv.tile)
				}
				sameBits(t, fmt.Sprintf("%s, call %d", label, call), y.Data, want.Data)
				be.Conv2dPrepared(&prepBN, x, w, bias, y, gamma, beta, mean, variance, c.p, bn, true)
				sameBits(t, fmt.Sprintf("%s, batch norm, call %d", label, call), y.Data, wantBN.Data)
				be.Conv2dPreparedResidual(&prepRes, x, w, nil, y, gamma, beta, mean, variance, residual, c.p, bn)
				sameBits(t, fmt.Sprintf("%s, batch norm and residual, call %d", label, call), y.Data, wantRes.Data)
			}
			// The next call without a residual has none.
			be.Conv2dPrepared(&prepBN, x, w, bias, y, gamma, beta, mean, variance, c.p, bn, true)
			sameBits(t, label+", batch norm after a residual call", y.Data, wantBN.Data)
			pr, ok := prep.State.(*prepared)
			if !ok || !pr.ready {
				t.Fatalf("%s: nothing prepared (%T)", label, prep.State)
			}
			if kept := len(pr.form) + pr.packed.Size(); (kept > 0) != (c.form != none) || (pr.packed.Size() > 0) != (c.form == dense) {
				t.Errorf("%s: a form of %d values kept (%d packed), want one: %v (packed: %v)", label, kept, pr.packed.Size(), c.form != none, c.form == dense)
			}
			// With the vector kernels every Winograd form is 4×4 tiles'
			// kept packed as B on maps up to eight wide.
			if wantU := c.form == winograd && be.vec.vector && c.w <= 8; (len(pr.uPacked) > 0) != wantU {
				t.Errorf("%s: U kept packed %v, want %v", label, len(pr.uPacked) > 0, wantU)
			}
			if (pr.live != nil) != c.trim {
				t.Errorf("%s: live taps kept %v, want %v", label, pr.live != nil, c.trim)
			}

			// The weights change: a prepared layer with a form keeps
			// multiplying the old one until Reset.
			for i := range w.Data {
				w.Data[i] = -w.Data[i]
			}
			be.Conv2dPrepared(&prep, x, w, bias, y, nil, nil, nil, nil, c.p, bn, false)
			if c.form != none || c.trim {
				sameBits(t, label+", weights changed, no Reset", y.Data, want.Data)
			}
			prep.Reset()
			reference(x, want, false)
			be.Conv2dPrepared(&prep, x, w, bias, y, nil, nil, nil, nil, c.p, bn, false)
			sameBits(t, label+", after Reset", y.Data, want.Data)

			// Another map size prepares anew.
			x2 := randTensor(rng, c.n, c.c, c.other[0], c.other[1])
			oh2, ow2 := c.p.OutSize(c.other[0], c.other[1])
			want2, y2 := tensor.New(c.n, c.f, oh2, ow2), tensor.New(c.n, c.f, oh2, ow2)
			reference(x2, want2, false)
			be.Conv2dPrepared(&prep, x2, w, bias, y2, nil, nil, nil, nil, c.p, bn, false)
			sameBits(t, label+", another map", y2.Data, want2.Data)
			be.Close()
		}
	}
}

// sameBits fails t unless got and want hold the same bits.
func sameBits(t *testing.T, label string, got, want []float32) {
	t.Helper()
	for i, v := range want {
		if math.Float32bits(got[i]) != math.Float32bits(v) {
			t.Fatalf("%s: y[%d] = %v, want %v", label, i, got[i], v)
		}
	}
}

// TestConvKept: a training forward pass that keeps (Conv2dKeep) gives
// Conv2d's bits, and the backward pass given what it kept
// (Conv2dBackwardKept) Conv2dBackward's, for layers of every path, on
// one and two threads; the dense layers' backward pass reads the matrix
// the forward pass built (weights changed in between, against the
// contract, still give the old input gradient), a new forward pass
// builds it anew, and a backward pass on another input builds its own.
func TestConvKept(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	k3, k3s2 := padded3x3(1), padded3x3(2)
	for _, c := range []struct {
		name          string
		n, c, f, h, w int
		p             tensor.ConvParams
		dense         bool
	}{
		{"3×3 on 2×2: dense", 5, 24, 20, 2, 2, k3, true},
		{"3×3 on 1×1: dense", 3, 33, 18, 1, 1, k3, true},
		{"3×3 stride 2 on 2×2: dense", 4, 16, 32, 2, 2, k3s2, true},
		{"3×3 on 8×8, 64 channels: Winograd", 3, 64, 64, 8, 8, k3, false},
		{"3×3 stride 2 on 8×8: by rows forward", 3, 16, 24, 8, 8, k3s2, false},
		{"3×3 on 1×12: live taps", 3, 16, 20, 1, 12, k3, false},
	} {
		for _, threads := range []int{1, 2} {
			label := fmt.Sprintf("%s, %d threads", c.name, threads)
			be := New(threads)
			x := randTensor(rng, c.n, c.c, c.h, c.w)
			w, bias := randTensor(rng, c.f, c.c, c.p.KernelH, c.p.KernelW), randTensor(rng, c.f)
			oh, ow := c.p.OutSize(c.h, c.w)
			dy := randTensor(rng, c.n, c.f, oh, ow)
			dw0, db0 := randTensor(rng, w.Shape...), randTensor(rng, c.f)
			backward := func(kept *tensor.PreparedWeights, x, w, dy *tensor.Tensor) (dx, dw, db *tensor.Tensor) {
				dx, dw, db = tensor.New(x.Shape...), dw0.Clone(), db0.Clone() // the gradients add to what is there
				if kept == nil {
					be.Conv2dBackward(x, w, dy, dx, dw, db, c.p)
				} else {
					be.Conv2dBackwardKept(kept, x, w, dy, dx, dw, db, c.p)
				}
				return dx, dw, db
			}
			same := func(what string, got, want [3]*tensor.Tensor) {
				t.Helper()
				for i, name := range []string{"dx", "dw", "db"} {
					sameBits(t, fmt.Sprintf("%s, %s: %s", label, what, name), got[i].Data, want[i].Data)
				}
			}
			var kept tensor.PreparedWeights
			y, want := tensor.New(c.n, c.f, oh, ow), tensor.New(c.n, c.f, oh, ow)
			be.Conv2d(x, w, bias, want, c.p)
			be.Conv2dKeep(&kept, x, w, bias, y, c.p)
			sameBits(t, label+", forward", y.Data, want.Data)
			wdx, wdw, wdb := backward(nil, x, w, dy)
			gdx, gdw, gdb := backward(&kept, x, w, dy)
			same("backward", [3]*tensor.Tensor{gdx, gdw, gdb}, [3]*tensor.Tensor{wdx, wdw, wdb})
			if pr, ok := kept.State.(*prepared); !ok || (len(pr.form) > 0) != c.dense {
				t.Fatalf("%s: kept %T, want the dense matrix kept: %v", label, kept.State, c.dense)
			}

			// The weights change without a forward pass: a dense layer's
			// input gradient still follows the kept matrix.
			w2 := w.Clone()
			for i := range w2.Data {
				w2.Data[i] = -w2.Data[i]
			}
			copy(w.Data, w2.Data)
			gdx, _, _ = backward(&kept, x, w, dy)
			if c.dense {
				sameBits(t, label+", weights changed, no forward pass: dx", gdx.Data, wdx.Data)
			}
			// A forward pass keeps the new matrix.
			be.Conv2dKeep(&kept, x, w, bias, y, c.p)
			wdx, wdw, wdb = backward(nil, x, w, dy)
			gdx, gdw, gdb = backward(&kept, x, w, dy)
			same("after a new forward pass", [3]*tensor.Tensor{gdx, gdw, gdb}, [3]*tensor.Tensor{wdx, wdw, wdb})

			// Another input (another map) than the kept pass's.
			x2 := randTensor(rng, c.n, c.c, c.h+2, c.w+2)
			oh2, ow2 := c.p.OutSize(c.h+2, c.w+2)
			dy2 := randTensor(rng, c.n, c.f, oh2, ow2)
			wdx, wdw, wdb = backward(nil, x2, w, dy2)
			gdx, gdw, gdb = backward(&kept, x2, w, dy2)
			same("another input", [3]*tensor.Tensor{gdx, gdw, gdb}, [3]*tensor.Tensor{wdx, wdw, wdb})
			be.Close()
		}
	}
}

// padded3x3 is a 3×3 convolution's params at the stride given, padding 1
// (ResNet's).
func padded3x3(stride int) tensor.ConvParams {
	return tensor.ConvParams{KernelH: 3, KernelW: 3, StrideH: stride, StrideW: stride, PadH: 1, PadW: 1}
}
