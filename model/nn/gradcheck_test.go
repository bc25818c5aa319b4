package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/tensor"
)

// objective is Σ y·r for a fixed random r: its gradient with respect to y is r.
func objective(y *tensor.Tensor, r []float32) float64 {
	var s float64
	for i, v := range y.Data {
		s += float64(v) * float64(r[i])
	}
	return s
}

// gradCheck compares a layer's analytic gradients (input and parameters)
// with central finite differences of the objective, on up to 24 sampled
// entries per tensor. reset runs before every forward (dropout rewinds its
// generator there).
func gradCheck(t *testing.T, be tensor.Backend, l Layer, x *tensor.Tensor, reset func()) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	forward := func() *tensor.Tensor {
		if reset != nil {
			reset()
		}
		y, err := l.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	y := forward()
	r := make([]float32, y.Len())
	for i := range r {
		r[i] = rng.Float32()*2 - 1
	}
	dy := tensor.New(y.Shape...)
	copy(dy.Data, r)
	ZeroGrad(be, Params(l))
	dx, err := l.Backward(dy)
	if err != nil {
		t.Fatal(err)
	}
	dx = dx.Clone()
	type target struct {
		name        string
		value, grad *tensor.Tensor
	}
	targets := []target{{"input", x, dx}}
	for _, v := range Params(l) {
		targets = append(targets, target{v.Name, v.Value, v.Grad.Clone()})
	}
	// A central difference at step h and at h/2 must agree, or the
	// entry sits within h of a kink (ReLU, max pooling) and says nothing;
	// such entries are skipped, but at most a third of them.
	numeric := func(v *tensor.Tensor, i int, h float64) float64 {
		orig := v.Data[i]
		v.Data[i] = orig + float32(h)
		up := objective(forward(), r)
		v.Data[i] = orig - float32(h)
		down := objective(forward(), r)
		v.Data[i] = orig
		return (up - down) / (2 * h)
	}
	const h = 1e-3
	for _, tg := range targets {
		idx := rng.Perm(tg.value.Len())
		if len(idx) > 24 {
			idx = idx[:24]
		}
		kinks := 0
		for _, i := range idx {
			num, half := numeric(tg.value, i, h), numeric(tg.value, i, h/2)
			if math.Abs(num-half) > 5e-3*(1+math.Abs(num)) {
				kinks++
				continue
			}
			got := float64(tg.grad.Data[i])
			if math.Abs(half-got) > 1e-2*(1+math.Abs(half)) {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", tg.name, i, got, half)
			}
		}
		if 3*kinks > len(idx) {
			t.Errorf("%s: %d of %d sampled entries are not smooth enough to check", tg.name, kinks, len(idx))
		}
	}
}

func randTensor(rng *rand.Rand, shape ...int) *tensor.Tensor {
	x := tensor.New(shape...)
	for i := range x.Data {
		x.Data[i] = rng.Float32()*2 - 1
	}
	return x
}

func TestGradients(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	drop := NewDropout(be, 0.3, 11)
	evalBN := NewBatchNorm2d(be, 3)
	evalBN.SetTraining(false)
	for i := range evalBN.RunningMean.Data {
		evalBN.RunningMean.Data[i] = 0.1 * float32(i)
		evalBN.RunningVar.Data[i] = 0.5 + float32(i)
	}
	evalBlock := NewBasicBlock(be, 3, 3, 1, rng)
	evalBlock.SetTraining(false)
	evalDown := NewBasicBlock(be, 2, 4, 2, rng)
	evalDown.SetTraining(false)
	tests := []struct {
		name  string
		layer Layer
		x     *tensor.Tensor
		reset func()
	}{
		{"conv3x3 pad1", NewConv2d(be, 3, 4, 3, Conv2dOptions{Padding: 1}, rng), randTensor(rng, 2, 3, 5, 6), nil},
		{"conv3x3 stride2 nobias", NewConv2d(be, 2, 3, 3, Conv2dOptions{Stride: 2, Padding: 1, NoBias: true}, rng), randTensor(rng, 3, 2, 7, 7), nil},
		{"conv1x1", NewConv2d(be, 3, 2, 1, Conv2dOptions{}, rng), randTensor(rng, 2, 3, 4, 4), nil},
		{"conv1x1 stride2", NewConv2d(be, 3, 2, 1, Conv2dOptions{Stride: 2}, rng), randTensor(rng, 2, 3, 5, 5), nil},
		{"linear", NewLinear(be, 7, 5, rng), randTensor(rng, 4, 7), nil},
		{"batchnorm train", NewBatchNorm2d(be, 3), randTensor(rng, 4, 3, 3, 2), nil},
		{"batchnorm 1d train", NewBatchNorm2d(be, 5), randTensor(rng, 6, 5), nil},
		{"batchnorm eval", evalBN, randTensor(rng, 2, 3, 2, 2), nil},
		{"relu", NewReLU(be), randTensor(rng, 3, 8), nil},
		{"maxpool2", NewMaxPool2d(be, 2, 0, 0), randTensor(rng, 2, 2, 6, 6), nil},
		{"maxpool3 s2 p1", NewMaxPool2d(be, 3, 2, 1), randTensor(rng, 1, 2, 7, 7), nil},
		{"avgpool2", NewAvgPool2d(be, 2, 0, 0), randTensor(rng, 2, 2, 5, 5), nil},
		{"avgpool3 s2 p1", NewAvgPool2d(be, 3, 2, 1), randTensor(rng, 1, 2, 6, 6), nil},
		{"adaptive avg 1x1", NewAdaptiveAvgPool2d(be, 1, 1), randTensor(rng, 2, 3, 4, 4), nil},
		{"adaptive avg 3x2 of 7x5", NewAdaptiveAvgPool2d(be, 3, 2), randTensor(rng, 1, 2, 7, 5), nil},
		{"dropout", drop, randTensor(rng, 4, 10), func() { drop.Calls = 0 }},
		{"flatten", NewFlatten(), randTensor(rng, 2, 3, 2, 2), nil},
		{"logsoftmax", NewLogSoftmax(be), randTensor(rng, 3, 6), nil},
		// A training-mode block is too curved for float32 finite differences
		// (batch statistics of a few values amplify every ReLU kink); the
		// chain without the ReLU is checked here, and the block itself against
		// PyTorch's autograd in the fixture tests.
		{"conv-bn-conv-bn train", NewSequential(NewConv2d(be, 2, 4, 3, Conv2dOptions{Stride: 2, Padding: 1, NoBias: true}, rng), NewBatchNorm2d(be, 4), NewConv2d(be, 4, 4, 3, Conv2dOptions{Padding: 1, NoBias: true}, rng), NewBatchNorm2d(be, 4)), randTensor(rng, 2, 2, 6, 6), nil},
		{"basic block eval", evalBlock, randTensor(rng, 2, 3, 4, 4), nil},
		{"basic block downsample eval", evalDown, randTensor(rng, 2, 2, 6, 6), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { gradCheck(t, be, tt.layer, tt.x, tt.reset) })
	}
}

func TestLossGradients(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	target := []int32{0, 4, 2}
	for _, ce := range []bool{false, true} {
		t.Run(fmt.Sprintf("crossentropy=%v", ce), func(t *testing.T) {
			loss := NewNLLLoss(be)
			if ce {
				loss = NewCrossEntropyLoss(be)
			}
			x := randTensor(rng, 3, 5)
			if _, err := loss.Forward(x, target); err != nil {
				t.Fatal(err)
			}
			g, err := loss.Backward()
			if err != nil {
				t.Fatal(err)
			}
			g = g.Clone()
			const eps = 1e-2
			for i := range x.Data {
				orig := x.Data[i]
				x.Data[i] = orig + eps
				up, _ := loss.Forward(x, target)
				x.Data[i] = orig - eps
				down, _ := loss.Forward(x, target)
				x.Data[i] = orig
				num := (float64(up) - float64(down)) / (2 * eps)
				if math.Abs(num-float64(g.Data[i])) > 1e-3 {
					t.Errorf("d loss/d x[%d]: analytic %.6g, numeric %.6g", i, g.Data[i], num)
				}
			}
		})
	}
}

func TestBadInputsAreErrors(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	tests := []struct {
		name  string
		layer Layer
		x     *tensor.Tensor
	}{
		{"conv wrong channels", NewConv2d(be, 3, 4, 3, Conv2dOptions{}, rng), tensor.New(1, 2, 5, 5)},
		{"conv too small", NewConv2d(be, 1, 4, 5, Conv2dOptions{}, rng), tensor.New(1, 1, 3, 3)},
		{"conv 2-D input", NewConv2d(be, 1, 4, 3, Conv2dOptions{}, rng), tensor.New(1, 9)},
		{"linear wrong width", NewLinear(be, 4, 2, rng), tensor.New(3, 5)},
		{"batchnorm channels", NewBatchNorm2d(be, 3), tensor.New(2, 4, 2, 2)},
		{"batchnorm single value", NewBatchNorm2d(be, 3), tensor.New(1, 3, 1, 1)},
		{"pool too small", NewMaxPool2d(be, 4, 0, 0), tensor.New(1, 1, 3, 3)},
		{"logsoftmax 4-D", NewLogSoftmax(be), tensor.New(1, 2, 2, 2)},
	}
	for _, tt := range tests {
		if _, err := tt.layer.Forward(tt.x); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	loss := NewCrossEntropyLoss(be)
	if _, err := loss.Forward(tensor.New(2, 3), []int32{0, 3}); err == nil {
		t.Error("target out of range: no error")
	}
	if _, err := loss.Forward(tensor.New(2, 3), []int32{0}); err == nil {
		t.Error("target count mismatch: no error")
	}
	if _, err := NewReLU(be).Backward(tensor.New(2)); err == nil {
		t.Error("backward before forward: no error")
	}
}
