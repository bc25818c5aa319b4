// Package optim holds the optimizers (torch.optim.SGD, Adam, Adadelta) and
// learning-rate schedules (StepLR, CosineAnnealingLR) with PyTorch's
// arithmetic. The updates run on the model's backend.
package optim

import (
	"fmt"

	"github.com/gorun/gorun/model/nn"
	"github.com/gorun/gorun/model/tensor"
)

// Optimizer updates parameters from their gradients.
type Optimizer interface {
	// Step applies one update to every parameter.
	Step()
	// LR returns the current learning rate.
	LR() float32
	// SetLR changes the learning rate (schedules call it).
	SetLR(lr float32)
	// State lists the optimizer's per-parameter buffers under stable names
	// ("<param>.<buffer>") plus its step count, for checkpoints.
	State() []nn.Var
}

// SGD is torch.optim.SGD.
type SGD struct {
	be     tensor.Backend
	params []nn.Var
	O      tensor.SGDOptions
	bufs   []*tensor.Tensor
	steps  int64
}

// NewSGD returns SGD over params.
func NewSGD(be tensor.Backend, params []nn.Var, o tensor.SGDOptions) (*SGD, error) {
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return nil, fmt.Errorf("optim: Nesterov momentum requires a momentum and zero dampening")
	}
	s := &SGD{be: be, params: params, O: o}
	for _, p := range params {
		s.bufs = append(s.bufs, tensor.New(p.Value.Shape...))
	}
	return s, nil
}

// Step implements Optimizer.
func (s *SGD) Step() {
	for i, p := range s.params {
		s.be.SGDStep(p.Value, p.Grad, s.bufs[i], s.O, s.steps == 0)
	}
	s.steps++
}

// LR implements Optimizer.
func (s *SGD) LR() float32 { return s.O.LR }

// SetLR implements Optimizer.
func (s *SGD) SetLR(lr float32) { s.O.LR = lr }

// State implements Optimizer.
func (s *SGD) State() []nn.Var {
	st := []nn.Var{{Name: "step", Count: &s.steps}}
	for i, p := range s.params {
		st = append(st, nn.Var{Name: p.Name + ".momentum_buffer", Value: s.bufs[i]})
	}
	return st
}

// Adam is torch.optim.Adam (amsgrad off).
type Adam struct {
	be     tensor.Backend
	params []nn.Var
	O      tensor.AdamOptions
	m, v   []*tensor.Tensor
	steps  int64
}

// NewAdam returns Adam over params; zero betas and eps take PyTorch's
// defaults (0.9, 0.999, 1e-8).
func NewAdam(be tensor.Backend, params []nn.Var, o tensor.AdamOptions) *Adam {
	if o.Beta1 == 0 && o.Beta2 == 0 {
		o.Beta1, o.Beta2 = 0.9, 0.999
	}
	if o.Eps == 0 {
		o.Eps = 1e-8
	}
	a := &Adam{be: be, params: params, O: o}
	for _, p := range params {
		a.m = append(a.m, tensor.New(p.Value.Shape...))
		a.v = append(a.v, tensor.New(p.Value.Shape...))
	}
	return a
}

// Step implements Optimizer.
func (a *Adam) Step() {
	a.steps++
	for i, p := range a.params {
		a.be.AdamStep(p.Value, p.Grad, a.m[i], a.v[i], a.O, int(a.steps))
	}
}

// LR implements Optimizer.
func (a *Adam) LR() float32 { return a.O.LR }

// SetLR implements Optimizer.
func (a *Adam) SetLR(lr float32) { a.O.LR = lr }

// State implements Optimizer.
func (a *Adam) State() []nn.Var {
	st := []nn.Var{{Name: "step", Count: &a.steps}}
	for i, p := range a.params {
		st = append(st, nn.Var{Name: p.Name + ".exp_avg", Value: a.m[i]}, nn.Var{Name: p.Name + ".exp_avg_sq", Value: a.v[i]})
	}
	return st
}

// Adadelta is torch.optim.Adadelta.
type Adadelta struct {
	be      tensor.Backend
	params  []nn.Var
	O       tensor.AdadeltaOptions
	sq, acc []*tensor.Tensor
	steps   int64
}

// NewAdadelta returns Adadelta over params; zero Rho and Eps take PyTorch's
// defaults (0.9, 1e-6).
func NewAdadelta(be tensor.Backend, params []nn.Var, o tensor.AdadeltaOptions) *Adadelta {
	if o.Rho == 0 {
		o.Rho = 0.9
	}
	if o.Eps == 0 {
		o.Eps = 1e-6
	}
	a := &Adadelta{be: be, params: params, O: o}
	for _, p := range params {
		a.sq = append(a.sq, tensor.New(p.Value.Shape...))
		a.acc = append(a.acc, tensor.New(p.Value.Shape...))
	}
	return a
}

// Step implements Optimizer.
func (a *Adadelta) Step() {
	for i, p := range a.params {
		a.be.AdadeltaStep(p.Value, p.Grad, a.sq[i], a.acc[i], a.O)
	}
	a.steps++
}

// LR implements Optimizer.
func (a *Adadelta) LR() float32 { return a.O.LR }

// SetLR implements Optimizer.
func (a *Adadelta) SetLR(lr float32) { a.O.LR = lr }

// State implements Optimizer.
func (a *Adadelta) State() []nn.Var {
	st := []nn.Var{{Name: "step", Count: &a.steps}}
	for i, p := range a.params {
		st = append(st, nn.Var{Name: p.Name + ".square_avg", Value: a.sq[i]}, nn.Var{Name: p.Name + ".acc_delta", Value: a.acc[i]})
	}
	return st
}
