package optim

import (
	"math"
	"slices"
	"testing"

	"github.com/gorun/gorun/model/cpu"
	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/safetensors"
	"github.com/gorun/gorun/model/tensor"
)

// TestOptimizersMatchPyTorch replays three gradient steps through every
// optimizer configuration of model/testdata/gen_fixtures.py and compares the
// parameters after each step with PyTorch's.
func TestOptimizersMatchPyTorch(t *testing.T) {
	f, err := safetensors.ReadFile("../testdata/optim.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) []float32 {
		e, ok := f.Get(name)
		if !ok {
			t.Fatalf("fixture has no %q", name)
		}
		return e.F32
	}
	be := cpu.New(1)
	defer be.Close()
	cases := map[string]func([]nn.Var) Optimizer{
		"sgd":          func(p []nn.Var) Optimizer { return mustSGD(t, be, p, tensor.SGDOptions{LR: 0.1}) },
		"sgd_momentum": func(p []nn.Var) Optimizer { return mustSGD(t, be, p, tensor.SGDOptions{LR: 0.1, Momentum: 0.9}) },
		"sgd_dampening_wd": func(p []nn.Var) Optimizer {
			return mustSGD(t, be, p, tensor.SGDOptions{LR: 0.1, Momentum: 0.9, Dampening: 0.3, WeightDecay: 0.01})
		},
		"sgd_nesterov": func(p []nn.Var) Optimizer {
			return mustSGD(t, be, p, tensor.SGDOptions{LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 0.01})
		},
		"adam": func(p []nn.Var) Optimizer { return NewAdam(be, p, tensor.AdamOptions{LR: 0.01}) },
		"adam_wd": func(p []nn.Var) Optimizer {
			return NewAdam(be, p, tensor.AdamOptions{LR: 0.01, Beta1: 0.8, Beta2: 0.99, WeightDecay: 0.1})
		},
		"adadelta": func(p []nn.Var) Optimizer { return NewAdadelta(be, p, tensor.AdadeltaOptions{LR: 1}) },
		"adadelta_wd": func(p []nn.Var) Optimizer {
			return NewAdadelta(be, p, tensor.AdadeltaOptions{LR: 0.5, Rho: 0.8, WeightDecay: 0.1})
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			p, _ := tensor.FromData(append([]float32(nil), get("p0")...), 10)
			g := tensor.New(10)
			opt := mk([]nn.Var{{Name: "p", Value: p, Grad: g}})
			for step := 1; step <= 3; step++ {
				copy(g.Data, get("g"+string(rune('0'+step))))
				opt.Step()
				want := get(name + "/p" + string(rune('0'+step)))
				for i := range want {
					if d := math.Abs(float64(p.Data[i] - want[i])); d > 1e-6*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("step %d: p[%d] = %v, PyTorch %v", step, i, p.Data[i], want[i])
					}
				}
			}
		})
	}
}

func mustSGD(t *testing.T, be tensor.Backend, p []nn.Var, o tensor.SGDOptions) Optimizer {
	s, err := NewSGD(be, p, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSchedulesMatchPyTorch(t *testing.T) {
	f, err := safetensors.ReadFile("../testdata/optim.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(1)
	defer be.Close()
	for _, name := range []string{"steplr", "cosine", "warmup_cosine"} {
		opt := mustSGD(t, be, nil, tensor.SGDOptions{LR: 1})
		var s Schedule
		switch name {
		case "steplr":
			s = NewStepLR(opt, 2, 0.5)
		case "cosine":
			s = NewCosineAnnealingLR(opt, 5, 0.01)
		case "warmup_cosine":
			s = NewWarmup(opt, 3, 0.01, NewCosineAnnealingLR(opt, 5, 0.01))
		}
		want, _ := f.Get(name + "/lr")
		for epoch, lr := range want.F32 {
			if math.Abs(float64(opt.LR()-lr)) > 1e-6 {
				t.Errorf("%s epoch %d: lr %v, PyTorch %v", name, epoch, opt.LR(), lr)
			}
			s.Step()
		}
	}
}

func TestNesterovNeedsMomentum(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	if _, err := NewSGD(be, nil, tensor.SGDOptions{LR: 0.1, Nesterov: true}); err == nil {
		t.Fatal("Nesterov without momentum accepted")
	}
}

// TestNoDecay: exempted parameters step as without weight decay, the
// others as with it, for every optimizer (PyTorch's two parameter groups,
// whose arithmetic the other tests compare).
func TestNoDecay(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	of := func(data []float32, shape ...int) *tensor.Tensor {
		x, err := tensor.FromData(append([]float32(nil), data...), shape...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	mk := func() []nn.Var {
		w := nn.Var{Name: "w", Value: of([]float32{1, -2, 3, 4}, 2, 2), Grad: of([]float32{0.1, 0.2, -0.3, 0.4}, 2, 2)}
		b := nn.Var{Name: "b", Value: of([]float32{0.5, -1}, 2), Grad: of([]float32{-0.2, 0.3}, 2)}
		return []nn.Var{w, b}
	}
	for name, newOpt := range map[string]func([]nn.Var, float32) Optimizer{
		"sgd": func(p []nn.Var, wd float32) Optimizer {
			return mustSGD(t, be, p, tensor.SGDOptions{LR: 0.1, Momentum: 0.9, WeightDecay: wd})
		},
		"adam": func(p []nn.Var, wd float32) Optimizer {
			return NewAdam(be, p, tensor.AdamOptions{LR: 0.1, WeightDecay: wd})
		},
		"adadelta": func(p []nn.Var, wd float32) Optimizer {
			return NewAdadelta(be, p, tensor.AdadeltaOptions{LR: 1, WeightDecay: wd})
		},
	} {
		got, decayed, plain := mk(), mk(), mk()
		o := newOpt(got, 0.5)
		o.(interface{ SetNoDecay(func(nn.Var) bool) }).SetNoDecay(func(v nn.Var) bool { return v.Value.Dims() == 1 })
		withWD, without := newOpt(decayed, 0.5), newOpt(plain, 0)
		for range 2 {
			o.Step()
			withWD.Step()
			without.Step()
		}
		if !slices.Equal(got[0].Value.Data, decayed[0].Value.Data) {
			t.Errorf("%s: the decayed weight %v, want %v", name, got[0].Value.Data, decayed[0].Value.Data)
		}
		if !slices.Equal(got[1].Value.Data, plain[1].Value.Data) || slices.Equal(got[1].Value.Data, decayed[1].Value.Data) {
			t.Errorf("%s: the exempt bias %v, want %v (not %v)", name, got[1].Value.Data, plain[1].Value.Data, decayed[1].Value.Data)
		}
	}
}
