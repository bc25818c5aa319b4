package amp

import (
	"math"

	"github.com/gorun/gorun/model/nn"
)

// Scaler is torch.amp.GradScaler: the loss is multiplied by Scale before
// backward, so that gradients too small for float16 survive; before the
// optimizer step the gradients are divided by it again (Unscale), and a
// step whose gradients hold an infinity or NaN is skipped and the scale
// halved (Update). After GrowthInterval steps in a row without one, the
// scale doubles.
type Scaler struct {
	Scale          float32 // the loss's factor
	GrowthFactor   float32 // times Scale after GrowthInterval finite steps
	BackoffFactor  float32 // times Scale after a step with non-finite gradients
	GrowthInterval int
	// GoodSteps counts the finite steps since the scale last changed
	// (GradScaler's growth tracker).
	GoodSteps int
}

// NewScaler returns a Scaler with GradScaler's defaults: scale 65536,
// doubled after 2000 finite steps, halved on a non-finite one.
func NewScaler() *Scaler {
	return &Scaler{Scale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000}
}

// Unscale divides every parameter's gradient (on the host) by the scale
// and reports whether all of them are finite: the step may be taken.
func (s *Scaler) Unscale(params []nn.Var) (finite bool) {
	inv := 1 / s.Scale // exact: the scale is a power of two
	finite = true
	for _, p := range params {
		for i, g := range p.Grad.Data {
			g *= inv
			p.Grad.Data[i] = g
			if math.IsInf(float64(g), 0) || g != g {
				finite = false
			}
		}
	}
	return finite
}

// Update moves the scale after a step: halved (BackoffFactor) when the
// gradients were not finite, doubled (GrowthFactor) after GrowthInterval
// finite steps in a row.
func (s *Scaler) Update(finite bool) {
	if !finite {
		s.Scale *= s.BackoffFactor
		s.GoodSteps = 0
		return
	}
	s.GoodSteps++
	if s.GoodSteps == s.GrowthInterval {
		s.Scale *= s.GrowthFactor
		s.GoodSteps = 0
	}
}
