package amp

import (
	"math"
	"testing"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

func TestScalerUnscale(t *testing.T) {
	for _, c := range []struct {
		name   string
		grads  []float32
		want   []float32
		finite bool
	}{
		{"finite", []float32{65536, -32768, 3}, []float32{1, -0.5, 3.0 / 65536}, true},
		{"inf", []float32{1, float32(math.Inf(-1))}, nil, false},
		{"nan", []float32{float32(math.NaN()), 1}, nil, false},
	} {
		s := NewScaler()
		g := tensor.New(len(c.grads))
		copy(g.Data, c.grads)
		finite := s.Unscale([]nn.Var{{Name: "w", Value: tensor.New(len(c.grads)), Grad: g}})
		if finite != c.finite {
			t.Errorf("%s: finite %v", c.name, finite)
		}
		for i, w := range c.want {
			if g.Data[i] != w {
				t.Errorf("%s: gradient %d unscaled to %v, want %v", c.name, i, g.Data[i], w)
			}
		}
	}
}

// TestScalerUpdate: GradScaler's schedule — halved and the count reset on
// a non-finite step, doubled after GrowthInterval finite steps in a row.
func TestScalerUpdate(t *testing.T) {
	s := NewScaler()
	s.GrowthInterval = 3
	for i, c := range []struct {
		finite bool
		scale  float32
		good   int
	}{
		{true, 65536, 1}, {true, 65536, 2}, {false, 32768, 0}, {true, 32768, 1}, {true, 32768, 2},
		{true, 65536, 0}, {true, 65536, 1}, {false, 32768, 0}, {false, 16384, 0},
	} {
		s.Update(c.finite)
		if s.Scale != c.scale || s.GoodSteps != c.good {
			t.Fatalf("after update %d (finite %v): scale %v, %d good steps; want %v, %d", i+1, c.finite, s.Scale, s.GoodSteps, c.scale, c.good)
		}
	}
	if d := NewScaler(); d.Scale != 65536 || d.GrowthFactor != 2 || d.BackoffFactor != 0.5 || d.GrowthInterval != 2000 {
		t.Errorf("defaults %+v, want GradScaler's", d)
	}
}
