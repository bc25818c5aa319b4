package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
)

// fixture reads tensors written by model/testdata/gen_fixtures.py.
type fixture struct {
	t *testing.T
	f *safetensors.File
}

func openFixture(t *testing.T, name string) fixture {
	t.Helper()
	f, err := safetensors.ReadFile("../testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{t, f}
}

func (fx fixture) tensor(name string) *tensor.Tensor {
	fx.t.Helper()
	e, ok := fx.f.Get(name)
	if !ok {
		fx.t.Fatalf("fixture has no %q", name)
	}
	t, err := tensor.FromData(append([]float32(nil), e.F32...), e.Shape...)
	if err != nil {
		fx.t.Fatal(err)
	}
	return t
}

func (fx fixture) ints(name string) []int32 {
	e, ok := fx.f.Get(name)
	if !ok {
		fx.t.Fatalf("fixture has no %q", name)
	}
	out := make([]int32, len(e.I64))
	for i, v := range e.I64 {
		out[i] = int32(v)
	}
	return out
}

func assertClose(t *testing.T, what string, got *tensor.Tensor, want *tensor.Tensor, tol float64) {
	t.Helper()
	if !got.SameShape(want.Shape...) {
		t.Fatalf("%s: shape %s, PyTorch %s", what, got, want)
	}
	if e := tensor.RelDiff(got.Data, want.Data, 1e-6); e > tol || math.IsNaN(e) {
		t.Errorf("%s: relative error %.3g against PyTorch (tolerance %.0g)", what, e, tol)
	}
}

// TestLayersMatchPyTorch runs every layer on PyTorch's inputs and weights
// and compares outputs, input gradients, parameter gradients and updated
// buffers with what PyTorch 1.13 computed.
func TestLayersMatchPyTorch(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	fx := openFixture(t, "layers.safetensors")
	rng := rand.New(rand.NewPCG(1, 1))
	evalBlock := NewBasicBlock(be, 2, 4, 2, rng)
	evalBlock.SetTraining(false)
	evalBN := NewBatchNorm2d(be, 3)
	evalBN.SetTraining(false)
	cases := []struct {
		name  string
		layer Layer
	}{
		{"conv_s2p1", NewConv2d(be, 3, 4, 3, Conv2dOptions{Stride: 2, Padding: 1}, rng)},
		{"conv_1x1", NewConv2d(be, 3, 5, 1, Conv2dOptions{}, rng)},
		{"conv_nobias_p2", NewConv2d(be, 2, 3, 5, Conv2dOptions{Padding: 2, NoBias: true}, rng)},
		{"linear", NewLinear(be, 7, 5, rng)},
		{"bn_train", NewBatchNorm2d(be, 3)},
		{"bn_eval", evalBN},
		{"maxpool_k3s2p1", NewMaxPool2d(be, 3, 2, 1)},
		{"maxpool_k2", NewMaxPool2d(be, 2, 0, 0)},
		{"avgpool_k3s2p1", NewAvgPool2d(be, 3, 2, 1)},
		{"adaptive_3x2", NewAdaptiveAvgPool2d(be, 3, 2)},
		{"relu", NewReLU(be)},
		{"logsoftmax", NewLogSoftmax(be)},
		{"block_train", NewBasicBlock(be, 3, 3, 1, rng)},
		{"block_down_train", NewBasicBlock(be, 2, 4, 2, rng)},
		{"block_down_eval", evalBlock},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.name + "/"
			for _, v := range c.layer.State() {
				if v.Count != nil {
					continue
				}
				copy(v.Value.Data, fx.tensor(p+"param."+v.Name).Data)
			}
			ZeroGrad(be, Params(c.layer))
			y, err := c.layer.Forward(fx.tensor(p + "x"))
			if err != nil {
				t.Fatal(err)
			}
			assertClose(t, "output", y, fx.tensor(p+"y"), 1e-5)
			dx, err := c.layer.Backward(fx.tensor(p + "r"))
			if err != nil {
				t.Fatal(err)
			}
			assertClose(t, "input gradient", dx, fx.tensor(p+"dx"), 1e-4)
			for _, v := range c.layer.State() {
				switch {
				case v.IsParam():
					assertClose(t, v.Name+" gradient", v.Grad, fx.tensor(p+"grad."+v.Name), 1e-4)
				case v.Count != nil:
					if want := fx.ints(p + "buf." + v.Name)[0]; *v.Count != int64(want) {
						t.Errorf("%s = %d, PyTorch %d", v.Name, *v.Count, want)
					}
				default:
					assertClose(t, v.Name, v.Value, fx.tensor(p+"buf."+v.Name), 1e-5)
				}
			}
		})
	}
	for _, name := range []string{"crossentropy", "nll", "crossentropy_smooth"} {
		t.Run(name, func(t *testing.T) {
			loss := NewNLLLoss(be)
			switch name {
			case "crossentropy":
				loss = NewCrossEntropyLoss(be)
			case "crossentropy_smooth":
				loss = NewCrossEntropyLoss(be)
				loss.Smoothing = 0.1
			}
			l, err := loss.Forward(fx.tensor(name+"/x"), fx.ints(name+"/target"))
			if err != nil {
				t.Fatal(err)
			}
			want := fx.tensor(name + "/loss").Data[0]
			if math.Abs(float64(l-want)) > 1e-5*math.Abs(float64(want)) {
				t.Errorf("loss %v, PyTorch %v", l, want)
			}
			dx, err := loss.Backward()
			if err != nil {
				t.Fatal(err)
			}
			assertClose(t, "gradient", dx, fx.tensor(name+"/dx"), 1e-5)
		})
	}
}
